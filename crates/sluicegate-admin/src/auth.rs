//! Bearer tokens for the admin API (`admin.tokens`): read from their files
//! at start, compared in constant time (as SHA-256 digests, so neither the
//! bytes nor the length of a token leak through timing). A `read` token may
//! only GET (and HEAD); a `write` token may do everything.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ring::digest::{digest, SHA256};
use sluicegate_config::{AdminConfig, AdminRole};
use subtle::ConstantTimeEq;

use crate::http::{error, AdminState};

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
    fn role(&self, token: &[u8]) -> Option<AdminRole> {
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

/// Lets a request through if it carries a token allowed to do what it asks.
pub(crate) async fn check(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    if state.tokens.is_empty() {
        return next.run(req).await;
    }
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    let Some(role) = token.and_then(|t| state.tokens.role(t.as_bytes())) else {
        let mut resp = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"sluicegate-admin\""),
        );
        return resp;
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if role == AdminRole::Read && !reads {
        return error(StatusCode::FORBIDDEN, "this token may only read").into_response();
    }
    next.run(req).await
}
