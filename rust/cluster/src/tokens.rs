//! Hadoop delegation tokens on the control plane: the driver obtains fresh ones before the
//! old expire and hands them to every task (in the registration reply, then in a heartbeat
//! reply whenever a newer version exists), so that trainers keep reaching a Kerberized HDFS
//! for as long as the job runs, whatever lifetime the tokens have.
//!
//! The control plane may run without TLS, so the tokens travel sealed (AES-256-GCM) under
//! [`JobSecret::tokens_key`]: a party that sees the traffic, or holds only the control
//! credential, learns nothing it could present to the NameNode. The version is bound to the
//! seal, so an older set cannot be replayed as a newer one.

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

use crate::error::{ClusterError, Result};
#[cfg(doc)]
use crate::secret::JobSecret;

/// Fixed associated data of every seal: the purpose, then the version.
const PURPOSE: &[u8] = b"sparktrain v1: delegation tokens";

/// The key that seals tokens for the tasks of one generation ([`JobSecret::tokens_key`]).
pub type TokensKey = [u8; 32];

fn key_of(key: &TokensKey) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key suits AES-256"))
}

fn aad(version: u64) -> Vec<u8> {
    [PURPOSE, &version.to_le_bytes()].concat()
}

/// `tokens` of `version` sealed under `key` (a generation's [`JobSecret::tokens_key`]): a
/// fresh nonce, then the ciphertext and its tag.
pub fn seal(key: &TokensKey, version: u64, tokens: &[u8]) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| ClusterError::Secret(format!("no randomness: {e}")))?;
    let mut sealed = Vec::with_capacity(NONCE_LEN + tokens.len() + AES_256_GCM.tag_len());
    sealed.extend_from_slice(&nonce);
    sealed.extend_from_slice(tokens);
    let tag = key_of(key)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad(version)),
            &mut sealed[NONCE_LEN..],
        )
        .map_err(|_| ClusterError::Secret("the delegation tokens could not be sealed".into()))?;
    sealed.extend_from_slice(tag.as_ref());
    Ok(sealed)
}

/// The tokens `sealed` holds, when it was sealed under `key` as `version`.
pub fn open(key: &TokensKey, version: u64, sealed: &[u8]) -> Result<Vec<u8>> {
    let refused = || {
        ClusterError::Secret(format!(
            "the driver's delegation tokens (version {version}) do not open with this job's key: \
             altered on the way, or sealed for another generation"
        ))
    };
    if sealed.len() < NONCE_LEN + AES_256_GCM.tag_len() {
        return Err(refused());
    }
    let (nonce, rest) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
    let mut buffer = rest.to_vec();
    let plain =
        key_of(key).open_in_place(nonce, Aad::from(aad(version)), &mut buffer).map_err(|_| refused())?;
    Ok(plain.to_vec())
}

/// The tokens the driver hands out now: their version and the plain bytes, which the server
/// seals anew for each generation's key.
#[derive(Clone)]
pub(crate) struct Tokens {
    pub(crate) version: u64,
    pub(crate) plain: Vec<u8>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        f.debug_struct("Tokens").field("version", &self.version).field("bytes", &self.plain.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::secret::JobSecret;

    #[test]
    fn sealed_tokens_open_only_with_the_same_secret_and_version() {
        let secret = JobSecret::generate().unwrap().tokens_key();
        let tokens = b"HDTS\x00 the token storage bytes".to_vec();
        let sealed = seal(&secret, 3, &tokens).unwrap();
        assert!(!sealed.windows(tokens.len()).any(|w| w == tokens.as_slice()), "sealed, not in clear");
        assert_eq!(open(&secret, 3, &sealed).unwrap(), tokens);
        // Another generation's key, another version, or one flipped bit: refused.
        assert!(open(&JobSecret::generate().unwrap().tokens_key(), 3, &sealed).is_err());
        assert!(open(&secret, 4, &sealed).is_err());
        let mut flipped = sealed.clone();
        flipped[NONCE_LEN + 2] ^= 1;
        assert!(open(&secret, 3, &flipped).is_err());
        assert!(open(&secret, 3, &sealed[..10]).is_err());
        // Each seal has its own nonce.
        assert_ne!(seal(&secret, 3, &tokens).unwrap(), sealed);
    }
}
