//! The per-job secret: made on the driver and shipped to the tasks inside the Spark closure.
//! It never travels on the network itself: each plane gets a key of its own derived from it
//! (HKDF-SHA256, RFC 5869, with a label per plane), so that what one plane shows cannot be
//! turned into the other's key:
//!
//! - [`JobSecret::control_credential`] is what every control-plane call carries (in the clear
//!   when the control plane runs without TLS);
//! - [`JobSecret::ring_key`] keys the data plane's handshakes and, through them, every frame
//!   between the trainers;
//! - [`JobSecret::tokens_key`] seals the Hadoop delegation tokens the driver hands its tasks
//!   (see [`crate::tokens`]), which travel on the control plane.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

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

    /// The raw bytes. Nothing sends or keys anything with them directly: see
    /// [`JobSecret::ring_key`] and [`JobSecret::control_credential`].
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The key of the data plane (the ring between the trainers): its handshakes prove it,
    /// and each connection's frame key is derived from it.
    pub fn ring_key(&self) -> [u8; SECRET_LEN] {
        hkdf_sha256(SALT, &self.0, RING_LABEL)
    }

    /// The key that seals the Hadoop delegation tokens the driver hands its tasks over the
    /// control plane: a holder of the control credential alone cannot read them.
    pub fn tokens_key(&self) -> [u8; SECRET_LEN] {
        hkdf_sha256(SALT, &self.0, TOKENS_LABEL)
    }

    /// What every control-plane call carries, as 64 hex digits: a caller that has it is of this
    /// job. It cannot be turned into the secret or the ring's key.
    pub fn control_credential(&self) -> String {
        hex(&hkdf_sha256(SALT, &self.0, CONTROL_LABEL))
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

/// HKDF's salt: fixed, public, and this project's own.
const SALT: &[u8] = b"sparktrain job secret";
/// The label of the control plane's credential.
const CONTROL_LABEL: &[u8] = b"sparktrain v1: control plane call credential";
/// The label of the data plane's key.
const RING_LABEL: &[u8] = b"sparktrain v1: data plane ring key";
/// The label of the key that seals delegation tokens on the control plane.
const TOKENS_LABEL: &[u8] = b"sparktrain v1: delegation tokens seal key";

/// HKDF-SHA256 (RFC 5869) of `ikm`, 32 bytes of output: one block of the expansion.
fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8]) -> [u8; 32] {
    let hmac = |key: &[u8]| Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    let prk = hmac(salt).chain_update(ikm).finalize().into_bytes();
    hmac(&prk).chain_update(info).chain_update([1u8]).finalize().into_bytes().into()
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

    #[test]
    fn hkdf_matches_rfc_5869() {
        // Test case 1 of RFC 5869, whose first 32 bytes of output are the first block.
        fn unhex(h: &str) -> Vec<u8> {
            (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
        }
        let ikm = unhex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
        let salt = unhex("000102030405060708090a0b0c");
        let info = unhex("f0f1f2f3f4f5f6f7f8f9");
        assert_eq!(
            hex(&hkdf_sha256(&salt, &ikm, &info)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        );
    }

    #[test]
    fn the_planes_keys_differ_from_each_other_and_the_secret() {
        let s = JobSecret::generate().unwrap();
        let credential = s.control_credential();
        assert_eq!(credential.len(), 64);
        assert_ne!(credential, s.to_hex());
        assert_ne!(credential, hex(&s.ring_key()));
        assert_ne!(s.ring_key().as_slice(), s.as_bytes());
        assert_ne!(s.tokens_key(), s.ring_key());
        assert_ne!(hex(&s.tokens_key()), credential);
        // The same secret derives the same keys in every process.
        let copy = JobSecret::from_hex(&s.to_hex()).unwrap();
        assert_eq!((copy.control_credential(), copy.ring_key()), (credential, s.ring_key()));
    }
}
