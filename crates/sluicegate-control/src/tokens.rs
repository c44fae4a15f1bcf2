//! The admin API's bearer tokens (`admin.tokens`): read from their files at
//! start, kept as SHA-256 digests and compared in constant time, so
//! neither the bytes nor the length of a token leak through timing.

use ring::digest::{digest, SHA256};
use sluicegate_config::{AdminConfig, AdminRole};
use subtle::ConstantTimeEq;

/// The tokens the admin API accepts; empty: it asks for none.
#[derive(Default)]
pub struct Tokens {
    /// The SHA-256 of each token, with its role.
    known: Vec<([u8; 32], AdminRole)>,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

impl Tokens {
    /// Reads each token file of `admin`; a missing or empty one is an error.
    pub fn load(admin: &AdminConfig) -> Result<Tokens, String> {
        let mut known = Vec::with_capacity(admin.tokens.len());
        for (i, t) in admin.tokens.iter().enumerate() {
            let text = std::fs::read_to_string(&t.token_file).map_err(|e| {
                format!(
                    "admin.tokens[{i}].token_file {}: {e}",
                    t.token_file.display()
                )
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(format!(
                    "admin.tokens[{i}].token_file {}: the file holds no token",
                    t.token_file.display()
                ));
            }
            known.push((sha256(token.as_bytes()), t.role));
        }
        Ok(Tokens { known })
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The role of `token`, if it is known. Every known token is compared.
    pub(crate) fn role(&self, token: &[u8]) -> Option<AdminRole> {
        let given = sha256(token);
        let mut found = None;
        for (k, role) in &self.known {
            if bool::from(k.ct_eq(&given)) {
                found = Some(*role);
            }
        }
        found
    }
}
