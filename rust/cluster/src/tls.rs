//! The control plane's TLS when a job brings no certificate of its own: the driver makes a
//! self-signed certificate for each job and the tasks pin it, as they get it in the job's
//! settings (inside the Spark closure, like the job secret). Since the certificate is trusted
//! because it is pinned, not because a CA vouches for a host name, it names
//! [`PINNED_NAME`] and the tasks check that name whatever address they reach the driver at:
//! no host name, IP address or `spark.driver.host` has to be known, or valid in a
//! certificate, beforehand.

use crate::error::{ClusterError, Result};

/// The name a job's own certificate carries, and the name its tasks check. `.invalid` is
/// reserved (RFC 2606): no real host has it.
pub const PINNED_NAME: &str = "driver.sparktrain.invalid";

/// A fresh self-signed certificate for [`PINNED_NAME`] (ECDSA P-256) and its private key, as
/// PEM.
pub fn self_signed() -> Result<(String, String)> {
    let issued = rcgen::generate_simple_self_signed(vec![PINNED_NAME.to_string()])
        .map_err(|e| ClusterError::Secret(format!("cannot make the control plane's certificate: {e}")))?;
    Ok((issued.cert.pem(), issued.signing_key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_job_gets_its_own_certificate_and_key() {
        let (cert, key) = self_signed().unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY-----"));
        let (other, _) = self_signed().unwrap();
        assert_ne!(cert, other);
    }
}
