//! A service's `health`: active health checks of its endpoints, an HTTP
//! `GET path`, a TCP connect or the gRPC health protocol (`type: grpc`,
//! which needs the service to speak HTTP/2).

use crate::model::UpstreamProtocol;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

/// Longest gRPC service name a health check asks about, in bytes.
const MAX_GRPC_SERVICE: usize = 1024;

pub(crate) const HEALTH_KEYS: &[&str] = &[
    "type",
    "path",
    "service",
    "interval",
    "timeout",
    "healthy_after",
    "unhealthy_after",
    "expect_status",
];

/// A health check's `type`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HealthType {
    Http,
    Tcp,
    Grpc,
}

/// Decodes a service's `health`. `protocol` is the service's (`None`
/// when it has errors of its own); `explicit`: it was written, not the
/// default.
pub(crate) fn health(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    protocol: Option<UpstreamProtocol>,
    explicit: bool,
) -> Option<crate::model::HealthCheck> {
    let f = fields(cx, node, path, "health", HEALTH_KEYS)?;
    let mut ok = true;
    let kind = match f.get("type") {
        None => HealthType::Http,
        Some(n) => match reader::scalar(cx, n, path.key("type"), "http, tcp or grpc") {
            Some("http") => HealthType::Http,
            Some("tcp") => HealthType::Tcp,
            Some("grpc") => HealthType::Grpc,
            Some(other) => {
                cx.at(
                    n.pos,
                    path.key("type"),
                    format_args!("expected http, tcp or grpc, found {}", quote(other)),
                );
                ok = false;
                HealthType::Http
            }
            None => {
                ok = false;
                HealthType::Http
            }
        },
    };
    let check_path = match f.get("path") {
        None => "/".to_string(),
        Some(n) => match reader::string(cx, n, path.key("path")) {
            Some(p) if p.starts_with('/') && !p.contains([' ', '\r', '\n']) => p.to_string(),
            Some(p) => {
                cx.at(
                    n.pos,
                    path.key("path"),
                    format_args!("expected a path like /healthz, found {}", quote(p)),
                );
                ok = false;
                String::new()
            }
            None => {
                ok = false;
                String::new()
            }
        },
    };
    match kind {
        HealthType::Tcp if f.get("path").is_some() => {
            cx.at(f.pos, path.key("path"), "does not apply to type: tcp");
            ok = false;
        }
        HealthType::Grpc => {
            for key in ["path", "expect_status"] {
                if f.get(key).is_some() {
                    cx.at(f.pos, path.key(key), "does not apply to type: grpc");
                    ok = false;
                }
            }
            if let (Some(p), Some(n)) = (protocol, f.get("type")) {
                if !p.http2() {
                    let how = if explicit { "" } else { " by default" };
                    cx.at(
                        n.pos,
                        path.key("type"),
                        format_args!(
                            "grpc needs the service's protocol to be h2c, h2 or auto \
                             (the gRPC health protocol runs over HTTP/2); it is http1{how}"
                        ),
                    );
                    ok = false;
                }
            }
        }
        _ => {}
    }
    let grpc_service = match f.get("service") {
        None => String::new(),
        Some(_) if kind != HealthType::Grpc => {
            cx.at(f.pos, path.key("service"), "only applies to type: grpc");
            ok = false;
            String::new()
        }
        Some(n) => match reader::string(cx, n, path.key("service")) {
            Some(name) if name.len() <= MAX_GRPC_SERVICE && !name.contains(char::is_control) => {
                name.to_string()
            }
            Some(_) => {
                let what = format!(
                    "a gRPC service name (at most {MAX_GRPC_SERVICE} bytes, no control characters)"
                );
                cx.expected(n, path.key("service"), &what);
                ok = false;
                String::new()
            }
            None => {
                ok = false;
                String::new()
            }
        },
    };
    let mut interval = std::time::Duration::from_secs(2);
    let mut timeout = std::time::Duration::from_secs(1);
    reader::duration_field(cx, &f, path, "interval", &mut interval);
    reader::duration_field(cx, &f, path, "timeout", &mut timeout);
    if interval < std::time::Duration::from_millis(10) {
        cx.at(f.pos, path.key("interval"), "must be at least 10ms");
        ok = false;
    }
    let count = |cx: &mut Cx, key: &str, default: u32| -> Option<u32> {
        match f.get(key) {
            None => Some(default),
            Some(n) => reader::int_in(cx, n, path.key(key), 1, 100).map(|v| v as u32),
        }
    };
    let healthy_after = count(cx, "healthy_after", 2);
    let unhealthy_after = count(cx, "unhealthy_after", 3);
    let mut expect_status = vec![(200, 399)];
    if let Some(n) = f.get("expect_status") {
        let p = path.key("expect_status");
        expect_status.clear();
        let items: Vec<&Node> = match reader::list(cx, n, p, "a list of statuses") {
            Some(items) => items.iter().collect(),
            None => {
                ok = false;
                Vec::new()
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let text = reader::scalar(cx, item, p.index(i), "a status or a range like 200-299");
            let parsed = text.and_then(|t| {
                let (a, b) = t.split_once('-').unwrap_or((t, t));
                let a: u16 = a.trim().parse().ok()?;
                let b: u16 = b.trim().parse().ok()?;
                (100 <= a && a <= b && b <= 599).then_some((a, b))
            });
            match parsed {
                Some(r) => expect_status.push(r),
                None => {
                    if text.is_some() {
                        cx.expected(item, p.index(i), "a status or a range like 200-299");
                    }
                    ok = false;
                }
            }
        }
    }
    if !ok {
        return None;
    }
    Some(crate::model::HealthCheck {
        path: (kind == HealthType::Http).then_some(check_path),
        grpc_service: (kind == HealthType::Grpc).then_some(grpc_service),
        interval,
        timeout,
        healthy_after: healthy_after?,
        unhealthy_after: unhealthy_after?,
        expect_status,
    })
}
