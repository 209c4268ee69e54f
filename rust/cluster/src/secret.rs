//! The per-job secret: made on the driver, shipped to the tasks inside the Spark closure, and
//! carried by every control-plane call. Nothing else authenticates a caller, so a call without
//! it is refused.

use std::fmt;

use crate::error::{ClusterError, Result};

/// Bytes of randomness in a secret.
pub const SECRET_LEN: usize = 32;

/// A random per-job secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret([u8; SECRET_LEN]);

impl JobSecret {
    /// A fresh secret from the operating system's random source.
    pub fn generate() -> Result<Self> {
        Ok(JobSecret(random()?))
    }

    /// The secret as 64 lowercase hex digits, the form that travels in closures and metadata.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The raw bytes, for keying MACs (the data plane proves knowledge of them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A secret from its hex form.
    pub fn from_hex(hex: &str) -> Result<Self> {
        let bad = || ClusterError::Secret(format!("expected {} hex digits", 2 * SECRET_LEN));
        if hex.len() != 2 * SECRET_LEN || !hex.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; SECRET_LEN];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(JobSecret(bytes))
    }

    /// Whether `presented` (the hex form a caller sent) is this secret. The comparison takes the
    /// same time wherever the first difference is, so timing reveals nothing of the secret.
    pub fn verify(&self, presented: &str) -> bool {
        JobSecret::from_hex(presented).is_ok_and(|p| self.matches(&p))
    }

    /// Whether `other` is this secret, compared in constant time as [`JobSecret::verify`] does.
    pub fn matches(&self, other: &JobSecret) -> bool {
        same_bytes(&self.0, &other.0)
    }
}

impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret itself, e.g. in a logged error or a panic message.
        f.write_str("JobSecret(<redacted>)")
    }
}

/// A fresh random task token (see [`crate::job::Job::check_token`]), as 32 hex digits.
pub fn task_token() -> Result<String> {
    Ok(hex(&random::<16>()?))
}

/// `N` bytes from the operating system's random source.
fn random<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| ClusterError::Secret(format!("no randomness: {e}")))?;
    Ok(bytes)
}

/// `bytes` as lowercase hex digits.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `presented` equals `expected`, in a time that does not depend on where they first
/// differ (their lengths are public).
pub fn same(presented: &str, expected: &str) -> bool {
    same_bytes(presented.as_bytes(), expected.as_bytes())
}

fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_verification() {
        let s = JobSecret::generate().unwrap();
        let hex = s.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(JobSecret::from_hex(&hex).unwrap(), s);
        assert!(s.verify(&hex));
        let mut wrong = hex.clone().into_bytes();
        wrong[63] = if wrong[63] == b'0' { b'1' } else { b'0' };
        assert!(!s.verify(std::str::from_utf8(&wrong).unwrap()));
        assert!(!s.verify(""));
        assert_ne!(JobSecret::generate().unwrap(), s);
        assert!(JobSecret::from_hex("zz").is_err());
        assert_eq!(format!("{s:?}"), "JobSecret(<redacted>)");
    }
}
