//! JWT: an app's `jwt` (algorithm and key, files read at load) and the
//! top-level `jwt` settings with their OpenID Connect `issuers`.

use std::collections::HashMap;

use crate::model::{AppJwt, Introspection, JwksSource, JwtAlg, JwtIssuer, JwtKey, JwtSettings};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

pub(crate) const APP_JWT_KEYS: &[&str] = &[
    "alg",
    "secret",
    "secret_file",
    "public_key",
    "public_key_file",
];

pub(crate) const JWT_KEYS: &[&str] = &[
    "issuer",
    "audience",
    "app_claim",
    "leeway",
    "issuers",
    "close_on_expiry",
];

pub(crate) const ISSUER_KEYS: &[&str] = &[
    "name",
    "issuer",
    "discovery",
    "jwks_uri",
    "audiences",
    "app_claim",
    "default_plan",
    "claims_to_headers",
    "ca_file",
    "introspection",
];

pub(crate) const INTROSPECTION_KEYS: &[&str] =
    &["client_id", "client_secret_file", "cache", "endpoint"];

/// `cache` of an issuer's `introspection` when not given.
pub const DEFAULT_INTROSPECTION_CACHE: std::time::Duration = std::time::Duration::from_secs(60);

/// Decodes an app's `jwt`: the algorithm and one key source (files are
/// read now, so a missing file is a config error with its line).
pub(crate) fn app_jwt(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<AppJwt> {
    let f = fields(cx, node, path, "app jwt", APP_JWT_KEYS)?;
    let alg = f.require(cx, path, "alg").and_then(|n| {
        let p = path.key("alg");
        match reader::scalar(cx, n, p, "HS256, RS256 or ES256")? {
            "HS256" => Some(JwtAlg::HS256),
            "RS256" => Some(JwtAlg::RS256),
            "ES256" => Some(JwtAlg::ES256),
            other => {
                cx.at(
                    n.pos,
                    p,
                    format_args!("expected HS256, RS256 or ES256, found {}", quote(other)),
                );
                None
            }
        }
    })?;
    let (inline, file, what) = match alg {
        JwtAlg::HS256 => ("secret", "secret_file", "a shared secret"),
        _ => ("public_key", "public_key_file", "a PEM public key"),
    };
    for wrong in APP_JWT_KEYS[1..]
        .iter()
        .filter(|k| **k != inline && **k != file)
    {
        if let Some(n) = f.get(wrong) {
            cx.at(n.pos, path.key(wrong), "does not apply to this alg");
        }
    }
    let bytes = match (f.get(inline), f.get(file)) {
        (Some(_), Some(n)) => {
            cx.at(
                n.pos,
                path.key(file),
                format_args!("give either {inline} or {file}, not both"),
            );
            return None;
        }
        (None, None) => {
            cx.at(
                f.pos,
                path,
                format_args!("missing {inline} or {file} ({what})"),
            );
            return None;
        }
        (Some(n), None) => reader::string(cx, n, path.key(inline))?.as_bytes().to_vec(),
        (None, Some(n)) => {
            let p = path.key(file);
            let name = reader::string(cx, n, p)?;
            match std::fs::read(name) {
                Ok(b) => b,
                Err(e) => {
                    cx.at(n.pos, p, format_args!("cannot read {}: {e}", quote(name)));
                    return None;
                }
            }
        }
    };
    let key = match alg {
        JwtAlg::HS256 => {
            if bytes.len() < 32 {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(at, path, "an HS256 secret needs at least 32 bytes");
                return None;
            }
            JwtKey::Secret(bytes)
        }
        _ => {
            if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path,
                    "expected a PEM public key (-----BEGIN PUBLIC KEY-----)",
                );
                return None;
            }
            JwtKey::PublicKeyPem(bytes)
        }
    };
    Some(AppJwt { alg, key })
}

/// Decodes the top-level `jwt` settings; `plans` are the defined plan
/// names (an issuer's `default_plan` must be one).
pub(crate) fn jwt_settings(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    plans: &[&str],
) -> JwtSettings {
    let mut out = JwtSettings::default();
    let Some(f) = fields(cx, node, path, "jwt", JWT_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("issuer") {
        out.issuer = reader::string(cx, n, path.key("issuer")).map(str::to_string);
    }
    if let Some(n) = f.get("audience") {
        out.audience = reader::string(cx, n, path.key("audience")).map(str::to_string);
    }
    if let Some(n) = f.get("app_claim") {
        if let Some(c) = reader::string(cx, n, path.key("app_claim")) {
            out.app_claim = c.to_string();
        }
    }
    reader::duration_field(cx, &f, path, "leeway", &mut out.leeway);
    if let Some(n) = f.get("issuers") {
        let p = path.key("issuers");
        if let Some(items) = reader::list(cx, n, p, "a list of issuers") {
            let mut names = HashMap::new();
            let mut isses = HashMap::new();
            let mut introspecting: Option<usize> = None;
            for (i, item) in items.iter().enumerate() {
                let ip = p.index(i);
                if let Some(iss) = issuer(cx, item, ip, plans, &mut names) {
                    // An opaque token names no issuer: it is sent to the
                    // one issuer that introspects, never to several.
                    if iss.introspection.is_some() {
                        if let Some(first) = introspecting {
                            cx.at(
                                item.pos,
                                ip.key("introspection"),
                                format_args!(
                                    "only one issuer may have introspection (issuers[{first}] has it)"
                                ),
                            );
                            continue;
                        }
                        introspecting = Some(i);
                    }
                    let given = |first| {
                        format!(
                            "another issuer has the same issuer {} (first at {first})",
                            quote(&iss.issuer)
                        )
                    };
                    let at = (item.pos, ip.key("issuer"));
                    if reader::unique(cx, &mut isses, iss.issuer.clone(), item.pos, at, given) {
                        out.issuers.push(iss);
                    }
                }
            }
        }
    }
    if let Some(n) = f.get("close_on_expiry") {
        if let Some(b) = reader::boolean(cx, n, path.key("close_on_expiry")) {
            out.close_on_expiry = b;
        }
    }
    out
}

/// An `http://` or `https://` URL with a host.
fn is_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && !r
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    })
}

/// Decodes one entry of `jwt.issuers`.
fn issuer<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    plans: &[&str],
    names: &mut HashMap<&'n str, crate::yaml::Pos>,
) -> Option<JwtIssuer> {
    let f = fields(cx, node, path, "issuer", ISSUER_KEYS)?;
    let name = f
        .require(cx, path, "name")
        .and_then(|n| reader::unique_name(cx, n, path.key("name"), names, "issuer"));
    let iss = f.require(cx, path, "issuer").and_then(|n| {
        let p = path.key("issuer");
        let s = reader::string(cx, n, p)?;
        if !is_url(s) {
            cx.at(
                n.pos,
                p,
                "expected an http:// or https:// URL (the tokens' iss)",
            );
            return None;
        }
        Some(s.to_string())
    });
    let discovery = match f.get("discovery") {
        Some(n) => reader::boolean(cx, n, path.key("discovery"))?,
        None => false,
    };
    let jwks = match (discovery, f.get("jwks_uri")) {
        (true, Some(n)) => {
            cx.at(
                n.pos,
                path.key("jwks_uri"),
                "give either discovery: true or jwks_uri, not both",
            );
            None
        }
        (true, None) => Some(JwksSource::Discovery),
        (false, Some(n)) => {
            let p = path.key("jwks_uri");
            let s = reader::string(cx, n, p)?;
            if is_url(s) {
                Some(JwksSource::Uri(s.to_string()))
            } else {
                cx.at(n.pos, p, "expected an http:// or https:// URL");
                None
            }
        }
        (false, None) => {
            cx.at(f.pos, path, "missing jwks_uri (or discovery: true)");
            None
        }
    };
    let audiences = f.require(cx, path, "audiences").and_then(|n| {
        let p = path.key("audiences");
        let items = reader::list(cx, n, p, "a list of audiences")?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            out.push(reader::string(cx, item, p.index(i))?.to_string());
        }
        if out.is_empty() {
            cx.at(n.pos, p, "needs at least one audience");
            return None;
        }
        Some(out)
    });
    let app_claim = match f.get("app_claim") {
        Some(n) => Some(Some(
            reader::string(cx, n, path.key("app_claim"))?.to_string(),
        )),
        None => Some(None),
    };
    let default_plan = match f.get("default_plan") {
        None => Some(None),
        Some(n) => {
            let p = path.key("default_plan");
            let plan = reader::string(cx, n, p)?;
            if plans.contains(&plan) {
                Some(Some(plan.to_string()))
            } else {
                cx.at(n.pos, p, format_args!("unknown plan {}", quote(plan)));
                None
            }
        }
    };
    let claims_to_headers = match f.get("claims_to_headers") {
        None => Some(Vec::new()),
        Some(n) => {
            let p = path.key("claims_to_headers");
            let entries = reader::free_map(cx, n, p, "a mapping from claim to header name")?;
            let mut seen = HashMap::new();
            let mut out = Vec::new();
            let mut ok = true;
            for (key, claim, value) in entries {
                let ep = p.key(claim);
                let Some(header) = reader::string(cx, value, ep) else {
                    ok = false;
                    continue;
                };
                if !reader::is_token(header) {
                    cx.at(
                        value.pos,
                        ep,
                        format_args!("bad header name {}", quote(header)),
                    );
                    ok = false;
                    continue;
                }
                let lower = header.to_ascii_lowercase();
                if lower == "x-app-id" || lower == "authorization" || lower == "host" {
                    cx.at(
                        value.pos,
                        ep,
                        format_args!("{} is the gateway's own", quote(header)),
                    );
                    ok = false;
                    continue;
                }
                let given =
                    |first| format!("duplicate header {} (first at {first})", quote(header));
                if !reader::unique(cx, &mut seen, lower, key.pos, (value.pos, ep), given) {
                    ok = false;
                    continue;
                }
                out.push((claim.to_string(), header.to_string()));
            }
            ok.then_some(out)
        }
    };
    let ca_pem = match f.get("ca_file") {
        None => Some(None),
        Some(n) => {
            let p = path.key("ca_file");
            let file = reader::file_path(cx, n, p)?;
            match std::fs::read(&file) {
                Ok(b) if b.windows(10).any(|w| w == b"-----BEGIN") => Some(Some(b)),
                Ok(_) => {
                    cx.at(
                        n.pos,
                        p,
                        "expected PEM certificates (-----BEGIN CERTIFICATE-----)",
                    );
                    None
                }
                Err(e) => {
                    cx.at(
                        n.pos,
                        p,
                        format_args!("cannot read {}: {e}", quote(&file.to_string_lossy())),
                    );
                    None
                }
            }
        }
    };
    let introspection = match f.get("introspection") {
        None => Some(None),
        Some(n) => introspection(cx, n, path.key("introspection"), discovery).map(Some),
    };
    Some(JwtIssuer {
        introspection: introspection?,
        name: name?.to_string(),
        issuer: iss?,
        jwks: jwks?,
        audiences: audiences?,
        app_claim: app_claim?,
        default_plan: default_plan?,
        claims_to_headers: claims_to_headers?,
        ca_pem: ca_pem?,
    })
}

/// Decodes an issuer's `introspection` (the secret file is read now).
fn introspection(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    discovery: bool,
) -> Option<Introspection> {
    let f = fields(cx, node, path, "introspection", INTROSPECTION_KEYS)?;
    let client_id = f
        .require(cx, path, "client_id")
        .and_then(|n| reader::string(cx, n, path.key("client_id")))
        .map(str::to_string);
    let client_secret = f.require(cx, path, "client_secret_file").and_then(|n| {
        let p = path.key("client_secret_file");
        let file = reader::file_path(cx, n, p)?;
        match std::fs::read_to_string(&file) {
            Ok(s) if !s.trim_end_matches(['\r', '\n']).is_empty() => {
                Some(s.trim_end_matches(['\r', '\n']).to_string())
            }
            Ok(_) => {
                cx.at(n.pos, p, "the file is empty");
                None
            }
            Err(e) => {
                cx.at(
                    n.pos,
                    p,
                    format_args!("cannot read {}: {e}", quote(&file.to_string_lossy())),
                );
                None
            }
        }
    });
    let mut cache = DEFAULT_INTROSPECTION_CACHE;
    reader::duration_field(cx, &f, path, "cache", &mut cache);
    let endpoint = match f.get("endpoint") {
        None if discovery => Some(None),
        None => {
            cx.at(
                f.pos,
                path,
                "missing endpoint (or the issuer's discovery: true)",
            );
            None
        }
        Some(n) => {
            let p = path.key("endpoint");
            let s = reader::string(cx, n, p)?;
            if is_url(s) {
                Some(Some(s.to_string()))
            } else {
                cx.at(n.pos, p, "expected an http:// or https:// URL");
                None
            }
        }
    };
    Some(Introspection {
        client_id: client_id?,
        client_secret: client_secret?,
        cache,
        endpoint: endpoint?,
    })
}
