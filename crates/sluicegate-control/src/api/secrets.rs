//! App keys are write-only: every read of the config shows each key
//! (`apps[].keys[]`) and each JWT shared secret (`apps[].jwt.secret`) as a
//! fingerprint, `sha256:` and the first 8 bytes of its SHA-256 in hex.
//! A write may send a fingerprint back where the running config has the
//! secret it stands for: it is replaced by that secret, so a config read,
//! edited and written back keeps its keys. A fingerprint nothing matches
//! stays as it is, and fails validation as any malformed key does.

use std::collections::HashMap;

use ring::digest::{digest, SHA256};
use serde_json::Value;

const PREFIX: &str = "sha256:";

/// The fingerprint of `secret`.
pub(crate) fn fingerprint(secret: &str) -> String {
    let d = digest(&SHA256, secret.as_bytes());
    let mut out = String::from(PREFIX);
    for b in &d.as_ref()[..8] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Calls `f` on each secret string of one app.
fn app_secrets(app: &mut Value, f: &mut impl FnMut(&mut String)) {
    if let Some(Value::Array(keys)) = app.get_mut("keys") {
        for k in keys {
            if let Value::String(s) = k {
                f(s);
            }
        }
    }
    if let Some(Value::String(s)) = app.get_mut("jwt").and_then(|j| j.get_mut("secret")) {
        f(s);
    }
}

/// Replaces the secrets of `apps` (a list of apps) by their fingerprints.
pub(crate) fn redact_apps(apps: &mut Value) {
    if let Value::Array(items) = apps {
        for app in items {
            redact_app(app);
        }
    }
}

/// Replaces one app's secrets by their fingerprints.
pub(crate) fn redact_app(app: &mut Value) {
    app_secrets(app, &mut |s| *s = fingerprint(s));
}

/// Replaces the secrets of a whole config by their fingerprints.
pub(crate) fn redact_config(config: &mut Value) {
    if let Some(apps) = config.get_mut("apps") {
        redact_apps(apps);
    }
}

/// The running secrets by fingerprint, from the running `apps` list.
pub(crate) fn known(apps: Option<&Value>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    if let Some(Value::Array(items)) = apps {
        for app in items {
            let mut app = app.clone();
            app_secrets(&mut app, &mut |s| {
                out.insert(fingerprint(s), s.clone());
            });
        }
    }
    out
}

/// Puts back the secrets `known` has for the fingerprints in `app`;
/// says whether there was one.
pub(crate) fn restore_app(app: &mut Value, known: &HashMap<String, String>) -> bool {
    let mut any = false;
    app_secrets(app, &mut |s| {
        if let Some(secret) = s
            .starts_with(PREFIX)
            .then(|| known.get(s.as_str()))
            .flatten()
        {
            *s = secret.clone();
            any = true;
        }
    });
    any
}

/// [`restore_app`] over a whole config.
pub(crate) fn restore_config(config: &mut Value, known: &HashMap<String, String>) -> bool {
    let mut any = false;
    if let Some(Value::Array(items)) = config.get_mut("apps") {
        for app in items {
            any |= restore_app(app, known);
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_show_fingerprints_and_writes_get_the_secrets_back() {
        let running = json!({ "apps": [
            { "id": "a", "keys": ["key-aaaaaaaa", "key-bbbbbbbb"] },
            { "id": "b", "jwt": { "alg": "HS256", "secret": "s".repeat(32) } }
        ] });
        let mut shown = running.clone();
        redact_config(&mut shown);
        let text = shown.to_string();
        assert!(
            !text.contains("key-aaaaaaaa") && !text.contains("sss"),
            "{text}"
        );
        let fp = shown["apps"][0]["keys"][0].as_str().unwrap().to_string();
        assert_eq!(fp.len(), PREFIX.len() + 16);
        assert_eq!(fp, fingerprint("key-aaaaaaaa"));

        // Written back with one key replaced and one unknown fingerprint.
        let mut written = shown.clone();
        written["apps"][0]["keys"][1] = json!("key-cccccccc");
        written["apps"][1]["keys"] = json!(["sha256:0000000000000000"]);
        assert!(restore_config(&mut written, &known(running.get("apps"))));
        assert_eq!(
            written["apps"][0]["keys"],
            json!(["key-aaaaaaaa", "key-cccccccc"])
        );
        assert_eq!(written["apps"][1]["jwt"]["secret"], json!("s".repeat(32)));
        assert_eq!(
            written["apps"][1]["keys"],
            json!(["sha256:0000000000000000"])
        );
    }
}
