//! A cache purge's JSON body, `{"key"?, "prefix"?, "tag"?, "route"?}`,
//! read into the store's [`Purge`]: by `POST /cache/purge` (`api/cache.rs`)
//! and from the fleet's purge records in etcd (`etcd/purge.rs`).

use serde_json::Value;
use sluicegate_proxy::cache_admin::Purge;

use crate::history::Issue;

/// Reads a purge body: `{"key"?, "prefix"?, "tag"?, "route"?}`, each a
/// non-empty string, at least one; problems at their JSON paths.
pub(crate) fn purge_of(body: &Value) -> Result<Purge, Vec<Issue>> {
    let issue = |path: &str, message: &str| Issue {
        path: path.to_string(),
        message: message.to_string(),
    };
    let Value::Object(fields) = body else {
        return Err(vec![issue(
            "$",
            "expected an object with key, prefix, tag and/or route",
        )]);
    };
    let mut out = Purge::default();
    let mut issues = Vec::new();
    for (k, v) in fields {
        let Some(s) = v.as_str().filter(|s| !s.is_empty()) else {
            if matches!(k.as_str(), "key" | "prefix" | "tag" | "route") {
                issues.push(issue(&format!("$.{k}"), "expected a non-empty string"));
            } else {
                issues.push(issue(
                    &format!("$.{k}"),
                    "unknown key (expected key, prefix, tag or route)",
                ));
            }
            continue;
        };
        match k.as_str() {
            "key" => out.key = Some(s.as_bytes().to_vec()),
            "prefix" => out.prefix = Some(s.as_bytes().to_vec()),
            "tag" => out.tag = Some(s.as_bytes().to_vec()),
            "route" => out.route = Some(s.to_string()),
            other => issues.push(issue(
                &format!("$.{other}"),
                "unknown key (expected key, prefix, tag or route)",
            )),
        }
    }
    let given = [out.key.is_some(), out.prefix.is_some(), out.tag.is_some()];
    if issues.is_empty() && !given.contains(&true) && out.route.is_none() {
        issues.push(issue("$", "give key, prefix, tag and/or route"));
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}
