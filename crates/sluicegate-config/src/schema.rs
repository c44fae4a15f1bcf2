//! JSON Schemas (OpenAPI 3.1) of the config and of each resource the admin API serves, built from the decoders' own key lists.
//!
//! Every mapping the decoder reads with [`crate::reader::fields`] has its
//! key list as a constant beside its decoder; [`object`] takes that list
//! and asks for one property schema per key, so a key added to a decoder
//! without a schema fails the tests (see `tests`), and a schema can never
//! list a key the decoder refuses. Such objects have
//! `additionalProperties: false`, as the decoder refuses unknown keys.
//!
//! The shapes follow the JSON form of a document ([`crate::Document`]):
//! plain YAML numbers and booleans are JSON numbers and booleans, every
//! other scalar a string. The schemas check form, not the rules between
//! fields (a route has `service` or `respond`, a service named by a route
//! exists): those stay with the decoder, which answers `400`.

use serde_json::{json, Value};
use utoipa::openapi::schema::{
    AdditionalProperties, AnyOfBuilder, ArrayBuilder, ObjectBuilder, Schema, Type,
};
use utoipa::openapi::{Ref, RefOr};

use crate::{
    apps, cluster, decode, discovery, health, http2, jwt, listen, policy, resilience, route,
    service, source, tls, trace,
};

type S = RefOr<Schema>;

/// The letters of a name (services, routes, apps, plans).
const NAME: &str = r"^[A-Za-z0-9_.\-]+$";
/// An HTTP token (header names, protocol names), as `reader::is_token`.
const TOKEN: &str = r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$";
/// A header value: no control character but tab.
const HEADER_VALUE: &str = r"^[^\u0000-\u0008\u000A-\u001F\u007F]*$";
/// A request path: from `/`, without `?`, `#`, spaces or control characters.
const PATH: &str = r"^/[^?#\s\u0000-\u001F\u007F]*$";
/// An address block, `ADDR/LEN` or one address.
const BLOCK: &str = r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$";
/// A rate: `N/s`, `N/min`, `N/h`, `N/day` (and their longer spellings).
const RATE: &str = r"^\s*[0-9]+\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$";
/// A quota: `N/minute`, `N/hour`, `N/day`, `N/month`.
const QUOTA: &str = r"^\s*[0-9]+\s*/\s*(min|minute|h|hour|d|day|month)\s*$";

/// The named schemas, for `components.schemas`: what the other schemas
/// point to with `$ref`, and one per resource.
pub fn components() -> Vec<(&'static str, S)> {
    vec![
        ("Duration", duration_schema()),
        ("Size", size_schema()),
        ("Name", name_schema()),
        ("HeaderOps", header_ops()),
        ("IpRules", ip_rules()),
        ("ListenerTls", listener_tls()),
        ("Service", service()),
        ("Route", route()),
        ("App", app()),
        ("Plan", plan(false)),
        ("PlanItem", plan(true)),
        ("Settings", top_level(false)),
        ("Config", top_level(true)),
    ]
}

fn r(name: &str) -> S {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn string(d: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(d))
}

fn pattern(d: &str, re: &str) -> ObjectBuilder {
    string(d).pattern(Some(re))
}

fn int(d: &str, min: u64, max: Option<u64>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .description(Some(d))
        .minimum(Some(min as f64))
        .maximum(max.map(|m| m as f64))
}

fn boolean(d: &str, default: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .description(Some(d))
        .default(Some(json!(default)))
}

fn choice(d: &str, values: &[&str]) -> ObjectBuilder {
    string(d).enum_values(Some(values.iter().copied()))
}

/// A pattern matching one of `words` in any case (JSON Schema's regexes
/// have no case-insensitive flag).
fn any_case(words: &[&str]) -> String {
    let alts: Vec<String> = words
        .iter()
        .map(|w| {
            w.chars()
                .map(|c| format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase()))
                .collect()
        })
        .collect();
    format!("^({})$", alts.join("|"))
}

fn with_default(b: ObjectBuilder, v: Value) -> S {
    b.default(Some(v)).into()
}

fn list(d: &str, item: impl Into<S>) -> S {
    ArrayBuilder::new()
        .description(Some(d))
        .items(ArrayItemsOf(item.into()))
        .into()
}

/// `ArrayBuilder::items` takes `Into<ArrayItems>`, which a `RefOr` is not.
struct ArrayItemsOf(S);

impl From<ArrayItemsOf> for utoipa::openapi::schema::ArrayItems {
    fn from(v: ArrayItemsOf) -> Self {
        Self::RefOrSchema(Box::new(v.0))
    }
}

fn any_of(d: &str, items: Vec<S>) -> S {
    let mut b = AnyOfBuilder::new().description(Some(d));
    for i in items {
        b = b.item(i);
    }
    b.into()
}

/// A mapping with names chosen by the user (header names, plan names).
fn map_of(d: &str, value: impl Into<S>) -> S {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(d))
        .additional_properties(Some(AdditionalProperties::RefOr(value.into())))
        .into()
}

/// A scalar as YAML writes it: text, or what YAML reads as a number or a
/// boolean (a header value `2`).
fn scalar(d: &str) -> S {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            Type::String,
            Type::Integer,
            Type::Number,
            Type::Boolean,
        ]))
        .description(Some(d))
        .into()
}

fn file(d: &str) -> S {
    pattern(d, r"^[^\u0000]+$").min_length(Some(1)).into()
}

/// The object a decoder reads with `fields(.., keys)`: one property per
/// key, each from `prop`, and no other key. A key `prop` has no schema for
/// is a bug the tests catch (in a release build it is left untyped).
fn object(
    d: &str,
    keys: &'static [&'static str],
    required: &[&str],
    prop: fn(&str) -> Option<S>,
) -> S {
    let mut b = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(d))
        .additional_properties(Some(AdditionalProperties::<Schema>::FreeForm(false)));
    for key in keys {
        let schema = prop(key).unwrap_or_else(|| {
            debug_assert!(false, "no schema for key {key:?} of {d:?}");
            ObjectBuilder::new().into()
        });
        b = b.property(*key, schema);
    }
    for key in required {
        debug_assert!(keys.contains(key), "{key} is not a key of {d:?}");
        b = b.required(*key);
    }
    b.into()
}

fn duration_schema() -> S {
    pattern(
        "A duration: one or more whole NUMBER UNIT parts, units ns, us (µs), ms, s, m, h; e.g. 250ms, 1m30s. Greater than zero.",
        r"^([0-9]+(ns|us|µs|ms|s|m|h))+$",
    )
    .examples([json!("1s")])
    .into()
}

fn size_schema() -> S {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            Type::String,
            Type::Integer,
        ]))
        .description(Some(
            "A byte count: a whole number, or one with a unit B, KB, KiB, MB, MiB, GB, GiB, TB, TiB (case-insensitive); greater than zero.",
        ))
        .pattern(Some(r"^\s*[0-9]+\s*([KkMmGgTt][Ii]?)?[Bb]?\s*$"))
        .minimum(Some(1.0))
        .into()
}

fn name_schema() -> S {
    pattern("A name: letters, digits, _ . and -.", NAME)
        .min_length(Some(1))
        .into()
}

fn dur(d: &str, default: Option<&str>) -> S {
    match default {
        // A `$ref` has no room for a default or a description of its own in
        // every tool: the description and default go on an `allOf` of one.
        Some(v) => utoipa::openapi::schema::AllOfBuilder::new()
            .item(r("Duration"))
            .description(Some(d))
            .default(Some(json!(v)))
            .into(),
        None => utoipa::openapi::schema::AllOfBuilder::new()
            .item(r("Duration"))
            .description(Some(d))
            .into(),
    }
}

fn size(d: &str, default: Value) -> S {
    utoipa::openapi::schema::AllOfBuilder::new()
        .item(r("Size"))
        .description(Some(d))
        .default(Some(default))
        .into()
}

fn methods(d: &str) -> S {
    let one = || pattern("An HTTP method (letters), e.g. GET.", "^[A-Za-z]+$");
    any_of(
        d,
        vec![
            one().into(),
            ArrayBuilder::new().items(one()).min_items(Some(1)).into(),
        ],
    )
}

fn header_map(d: &str) -> S {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(d))
        .property_names(Some(pattern("A header name.", TOKEN).build()))
        .additional_properties(Some(AdditionalProperties::RefOr(
            ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
                    Type::String,
                    Type::Integer,
                    Type::Number,
                    Type::Boolean,
                ]))
                .description(Some("The header's value (no control characters)."))
                .pattern(Some(HEADER_VALUE))
                .into(),
        )))
        .into()
}

fn header_names(d: &str) -> S {
    list(d, pattern("A header name.", TOKEN))
}

fn header_ops() -> S {
    object(
        "Header changes: set (replace), add (append), remove (drop).",
        policy::OPS_KEYS,
        &[],
        |k| {
            Some(match k {
                "set" => header_map("Headers set, replacing any received with the same name."),
                "add" => header_map("Headers added after any received."),
                "remove" => header_names("Header names dropped."),
                _ => return None,
            })
        },
    )
}

fn ip_rules() -> S {
    object(
        "Client addresses allowed and denied (ADDR/LEN blocks, or one address).",
        policy::IP_KEYS,
        &[],
        |k| {
            let block = pattern("An address block ADDR/LEN, or one address.", BLOCK);
            Some(match k {
                "allow" => list("When not empty, only these blocks are let in.", block),
                "deny" => list("These blocks are refused with 403.", block),
                _ => return None,
            })
        },
    )
}

// ---- services ----

fn service() -> S {
    object(
        "A service: a named set of backend endpoints and how requests are spread over them.",
        service::SERVICE_KEYS,
        // `endpoints` may be left out with `discovery` (the decoder then
        // checks that one of the two is given; the schema cannot say so
        // without nesting the properties, and with discovery leave the
        // list out rather than empty: the schema wants one item at least).
        &["name"],
        |k| {
            Some(match k {
                "name" => name("Unique among services; routes name it."),
                "endpoints" => ArrayBuilder::new()
                    .description(Some("The backends; at least one."))
                    .min_items(Some(1))
                    .items(ArrayItemsOf(endpoint()))
                    .into(),
                "balance" => with_default(
                    choice(
                        "How each request's endpoint is picked.",
                        &["round_robin", "least_conn", "p2c_ewma", "hash"],
                    ),
                    json!("round_robin"),
                ),
                "hash_key" => with_default(
                    pattern(
                        "What balance: hash hashes: client_ip, path or header:NAME. Only with balance: hash.",
                        "^(client_ip|path|header:.+)$",
                    ),
                    json!("client_ip"),
                ),
                "max_connections_per_endpoint" => with_default(
                    int("Requests in flight to one endpoint at once.", 1, None),
                    json!(512),
                ),
                "timeouts" => object(
                    "Upstream timeouts.",
                    service::SERVICE_TIMEOUT_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "connect" => dur("To open a connection to an endpoint.", Some("1s")),
                            "response_header" => dur("From the request sent to the whole response head.", Some("15s")),
                            "response_body" => dur("Longest pause within a response body.", Some("15s")),
                            "idle" => dur("How long an idle pooled connection is kept.", Some("60s")),
                            "request" => dur("From the request's arrival to the response head, retries included.", Some("30s")),
                            _ => return None,
                        })
                    },
                ),
                "health" => health(),
                "retries" => object(
                    "When a failed attempt is tried again on another endpoint.",
                    resilience::RETRY_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "attempts" => with_default(int("Tries in all, the first included.", 1, Some(10)), json!(2)),
                            "on" => list(
                                "What is tried again: connect, reset, timeout, a status 500-599, or grpc:STATUS.",
                                any_of(
                                    "A retry condition.",
                                    vec![
                                        choice("A failure kind.", &["connect", "reset", "timeout"]).into(),
                                        int("An upstream status.", 500, Some(599)).into(),
                                        pattern("A status, or grpc: and a gRPC status name.", "^([5][0-9][0-9]|grpc:[A-Za-z_]+)$").into(),
                                    ],
                                ),
                            ),
                            "budget" => with_default(
                                pattern("Retries allowed as a share of the service's requests, 0% to 100%.", r"^\s*[0-9]+\s*%\s*$"),
                                json!("20%"),
                            ),
                            _ => return None,
                        })
                    },
                ),
                "breaker" => object(
                    "A circuit breaker per endpoint.",
                    resilience::BREAKER_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "errors" => with_default(int("Failures within window that open the circuit.", 1, Some(1_000_000)), json!(5)),
                            "window" => dur("The span failures are counted over; at least 10ms.", Some("10s")),
                            "open_for" => dur("How long an open circuit sends nothing; at least 10ms.", Some("10s")),
                            "half_open_requests" => with_default(int("Probe requests let through after open_for.", 1, Some(1_000_000)), json!(1)),
                            "on_5xx" => boolean("Count 5xx answers as failures.", false).into(),
                            _ => return None,
                        })
                    },
                ),
                "ejection" => any_of(
                    "An endpoint whose connect fails leaves rotation for a while: true (the defaults), false (off) or the times.",
                    vec![
                        boolean("On with the defaults, or off.", true).into(),
                        object(
                            "How long a failing endpoint is out.",
                            resilience::EJECTION_KEYS,
                            &[],
                            |k| {
                                Some(match k {
                                    "base" => dur("Out of rotation after a failed connect; at least 10ms.", Some("1s")),
                                    "max" => dur("The longest ejection (doubling per failure in a row); at least base.", Some("30s")),
                                    _ => return None,
                                })
                            },
                        ),
                    ],
                ),
                "forwarded_headers" => boolean(
                    "Send X-Forwarded-For, -Proto and -Host upstream (off: none, and the client's dropped).",
                    true,
                )
                .into(),
                "tls" => any_of(
                    "Connect to the endpoints over TLS: true (the defaults), false (plain TCP) or the settings.",
                    vec![
                        boolean("TLS with the defaults, or plain TCP.", false).into(),
                        object(
                            "Upstream TLS settings.",
                            tls::UPSTREAM_TLS_KEYS,
                            &[],
                            |k| {
                                Some(match k {
                                    "sni" => string("The server name sent and checked (a DNS name); by default the endpoint's host name.").into(),
                                    "verify" => boolean("Check the upstream's certificate (false: tests only).", true).into(),
                                    "ca" => file("PEM CA bundle the upstream's certificate must chain to (default: system roots)."),
                                    "client_cert" => file("PEM certificate chain presented to the upstream; with client_key."),
                                    "client_key" => file("PEM private key of client_cert."),
                                    _ => return None,
                                })
                            },
                        ),
                    ],
                ),
                "discovery" => object(
                    "Endpoints found in DNS SRV records (ports and weights from the records), or registered in etcd; one of dns_srv and etcd.",
                    discovery::DISCOVERY_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "dns_srv" => pattern(
                                "The SRV name, e.g. _http._tcp.orders.example.",
                                r"^[A-Za-z0-9_.\-]+\.[A-Za-z0-9_.\-]+$",
                            )
                            .into(),
                            "etcd" => object(
                                "Endpoints that register themselves: every key under prefix (with a lease) is one; its value is IP:port or {\"address\": \"IP:port\", \"weight\": N}.",
                                discovery::DISCOVERY_ETCD_KEYS,
                                &["prefix"],
                                |k| {
                                    Some(match k {
                                        "prefix" => pattern("The key prefix, starting and ending with /.", "^/(.*/)?$").into(),
                                        _ => return None,
                                    })
                                },
                            ),
                            _ => return None,
                        })
                    },
                ),
                "protocol" => with_default(
                    choice(
                        "The HTTP version spoken to the endpoints (h2 and auto need tls).",
                        &["http1", "h2", "h2c", "auto"],
                    ),
                    json!("http1"),
                ),
                _ => return None,
            })
        },
    )
}

fn name(d: &str) -> S {
    utoipa::openapi::schema::AllOfBuilder::new()
        .item(r("Name"))
        .description(Some(d))
        .into()
}

fn endpoint() -> S {
    any_of(
        "An endpoint: host:port (weight 1), or an address and a weight.",
        vec![
            pattern(
                "host:port: an IP literal or a host name, and a port.",
                r"^.+:[0-9]+$",
            )
            .into(),
            object(
                "An endpoint with a weight.",
                service::ENDPOINT_KEYS,
                &["addr"],
                |k| {
                    Some(match k {
                        "addr" => pattern("host:port.", r"^.+:[0-9]+$").into(),
                        "weight" => with_default(
                            int("Relative share of requests.", 1, Some(1000)),
                            json!(1),
                        ),
                        _ => return None,
                    })
                },
            ),
        ],
    )
}

fn health() -> S {
    object(
        "Active health checks of the endpoints.",
        health::HEALTH_KEYS,
        &[],
        |k| {
            Some(match k {
                "type" => with_default(
                    choice(
                        "http: GET path; tcp: the connect alone; grpc: the gRPC health protocol.",
                        &["http", "tcp", "grpc"],
                    ),
                    json!("http"),
                ),
                "path" => with_default(pattern("What an http check requests.", PATH), json!("/")),
                "service" => with_default(
                    string("grpc only: the service asked about (\"\": the whole server).")
                        .max_length(Some(1024)),
                    json!(""),
                ),
                "interval" => dur("Between checks of one endpoint; at least 10ms.", Some("2s")),
                "timeout" => dur("A check that takes longer fails.", Some("1s")),
                "healthy_after" => with_default(
                    int(
                        "Passed checks in a row that bring an endpoint back.",
                        1,
                        Some(100),
                    ),
                    json!(2),
                ),
                "unhealthy_after" => with_default(
                    int("Failed checks in a row that take it out.", 1, Some(100)),
                    json!(3),
                ),
                "expect_status" => list(
                    "Statuses that pass an http check.",
                    any_of(
                        "A status, or a range FROM-TO.",
                        vec![
                            int("A status.", 100, Some(599)).into(),
                            pattern(
                                "A status or a range like 200-299.",
                                r"^\s*[0-9]{3}\s*(-\s*[0-9]{3}\s*)?$",
                            )
                            .into(),
                        ],
                    ),
                ),
                _ => return None,
            })
        },
    )
}

// ---- routes ----

fn route() -> S {
    object(
        "A route: which requests it takes (match) and what it does with them (service or respond, exactly one).",
        route::ROUTE_KEYS,
        &["name"],
        |k| {
            Some(match k {
                "name" => name("Unique among routes."),
                "match" => object(
                    "Conditions that must all hold; at most one of path, path_prefix, path_regex.",
                    route::matcher::MATCH_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "host" => pattern(
                                "The request's host without port: example.com or *.example.com.",
                                r"^(\*\.)?[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*\.?$",
                            )
                            .into(),
                            "path" => pattern("The path must equal this.", PATH).into(),
                            "path_prefix" => pattern("The path must start with this, segment by segment.", PATH).into(),
                            "path_regex" => string("The path must match this regular expression.").into(),
                            "methods" => methods("The request's method must be one of these."),
                            "headers" => header_map("Each header must be present with exactly this value."),
                            _ => return None,
                        })
                    },
                ),
                "service" => name("Proxy to this service."),
                "respond" => object(
                    "Answer directly.",
                    route::RESPOND_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "status" => with_default(int("The answer's status.", 100, Some(599)), json!(200)),
                            "body" => scalar("The answer's body (none for 1xx, 204, 304)."),
                            "headers" => header_map("The answer's headers (not Content-Length nor Transfer-Encoding)."),
                            _ => return None,
                        })
                    },
                ),
                "strip_prefix" => boolean("Remove the matched path_prefix before forwarding.", false).into(),
                "auth" => with_default(
                    choice("Who may call: an app by key, JWT or client certificate, or anyone.", &["app_key", "jwt", "mtls", "none"]),
                    json!("none"),
                ),
                "limit" => object(
                    "The route's own limit for every caller; rate or concurrency at least.",
                    apps::ROUTE_LIMIT_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "rate" => pattern("Steady rate: N/s, N/min, N/h or N/day.", RATE).into(),
                            "burst" => int("Requests at once above the rate; only with rate.", 1, Some(1_000_000_000)).into(),
                            "concurrency" => int("Requests in flight at once.", 1, Some(1_000_000_000)).into(),
                            "per" => with_default(choice("Counters per client address, or one set for the route.", &["client_ip", "route"]), json!("client_ip")),
                            "scope" => with_default(choice("local: per process; global: across the fleet (per: route and a rate).", &["local", "global"]), json!("local")),
                            "on_failure" => with_default(choice("A global limit while Redis is unreachable.", &["local", "deny"]), json!("local")),
                            _ => return None,
                        })
                    },
                ),
                "request_headers" => utoipa::openapi::schema::AllOfBuilder::new()
                    .item(r("HeaderOps"))
                    .description(Some("Header changes on the way upstream."))
                    .into(),
                "response_headers" => utoipa::openapi::schema::AllOfBuilder::new()
                    .item(r("HeaderOps"))
                    .description(Some("Header changes on the way back."))
                    .into(),
                "cors" => object(
                    "Cross-origin requests from browsers.",
                    policy::CORS_KEYS,
                    &["origins"],
                    |k| {
                        Some(match k {
                            "origins" => list(
                                "scheme://host[:port], scheme://*.suffix or *.",
                                pattern("An origin.", r"^(\*|[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+)$"),
                            ),
                            "methods" => list("Methods a preflight may ask for (default GET, HEAD, POST).", pattern("A method.", "^[A-Za-z]+$")),
                            "headers" => header_names("Request headers a preflight may ask for."),
                            "expose_headers" => header_names("Response headers the page may read."),
                            "credentials" => boolean("Allow credentials (not with origin *).", false).into(),
                            "max_age" => dur("How long a preflight answer may be cached.", None),
                            _ => return None,
                        })
                    },
                ),
                "ip" => utoipa::openapi::schema::AllOfBuilder::new()
                    .item(r("IpRules"))
                    .description(Some("Client addresses allowed and denied on this route."))
                    .into(),
                "rewrite" => object(
                    "Replace the first match of regex in the path (after strip_prefix).",
                    route::REWRITE_KEYS,
                    &["regex", "replacement"],
                    |k| {
                        Some(match k {
                            "regex" => string("A regular expression.").into(),
                            "replacement" => pattern(
                                "The replacement; $1 and ${name} name capture groups. No spaces, control characters, ? or #.",
                                r"^[^?#\s\u0000-\u001F\u007F]*$",
                            )
                            .into(),
                            _ => return None,
                        })
                    },
                ),
                "upgrade" => ArrayBuilder::new()
                    .description(Some("Protocols a client may switch to by Upgrade (not h2c); [] allows none."))
                    .items(pattern("A protocol name.", TOKEN))
                    .default(Some(json!(["websocket"])))
                    .into(),
                _ => return None,
            })
        },
    )
}

// ---- plans and apps ----

fn plan(named: bool) -> S {
    fn prop(k: &str) -> Option<S> {
        Some(match k {
            "rate" => pattern("Steady rate: N/s, N/min, N/h or N/day.", RATE).into(),
            "burst" => int(
                "Requests at once above the rate; only with rate.",
                1,
                Some(1_000_000_000),
            )
            .into(),
            "quota" => pattern(
                "Requests per calendar window (UTC): N/minute, N/hour, N/day or N/month.",
                QUOTA,
            )
            .into(),
            "concurrency" => int(
                "Requests in flight at once, per process.",
                1,
                Some(1_000_000_000),
            )
            .into(),
            "scope" => with_default(
                choice(
                    "local: per process; global: across the fleet (needs cluster.redis).",
                    &["local", "global"],
                ),
                json!("local"),
            ),
            "on_failure" => with_default(
                choice(
                    "A global plan while Redis is unreachable.",
                    &["local", "deny"],
                ),
                json!("local"),
            ),
            "name" => name("The plan's name (its key under plans)."),
            _ => return None,
        })
    }
    const D: &str = "A plan: a set of limits for apps, at least one of rate, quota, concurrency.";
    if named {
        object(D, PLAN_ITEM_KEYS, &["name"], prop)
    } else {
        object(D, apps::PLAN_KEYS, &[], prop)
    }
}

/// A plan as the admin API shows one: its limits and its name.
pub const PLAN_ITEM_KEYS: &[&str] = &[
    "name",
    "rate",
    "burst",
    "quota",
    "concurrency",
    "scope",
    "on_failure",
];

fn app() -> S {
    object(
        "An application that calls auth routes.",
        apps::APP_KEYS,
        &["id"],
        |k| {
            Some(match k {
                "id" => name("Unique among apps; sent upstream as X-App-Id."),
                "keys" => list(
                    "The app's keys. Write-only: a read shows each as a fingerprint, which a write may send back to keep the key.",
                    any_of(
                        "A key (written) or its fingerprint (read).",
                        vec![
                            pattern("A key: 8 to 256 letters, digits or - _ . ~ +.", r"^[A-Za-z0-9\-_.~+]{8,256}$")
                                .write_only(Some(true))
                                .into(),
                            pattern("The key's fingerprint: sha256: and 16 hex digits.", "^sha256:[0-9a-f]{16}$")
                                .read_only(Some(true))
                                .into(),
                        ],
                    ),
                ),
                "plan" => name("The plan for services not in plans_by_service."),
                "plans_by_service" => map_of("A plan per service name.", r("Name")),
                "services" => list("The services the app may call (default: all).", r("Name")),
                "methods" => list("The methods the app may use (default: all).", pattern("A method.", "^[A-Za-z]+$")),
                "paths" => list("Path prefixes the app may call (default: all).", pattern("A path prefix.", PATH)),
                "jwt" => object(
                    "How the app's tokens are checked: alg and one key source.",
                    jwt::APP_JWT_KEYS,
                    &["alg"],
                    |k| {
                        Some(match k {
                            "alg" => choice("The signing algorithm.", &["HS256", "RS256", "ES256"]).into(),
                            "secret" => any_of(
                                "HS256 shared secret, at least 32 bytes. Write-only: a read shows its fingerprint.",
                                vec![
                                    string("The secret.").min_length(Some(32)).write_only(Some(true)).into(),
                                    pattern("The secret's fingerprint.", "^sha256:[0-9a-f]{16}$").read_only(Some(true)).into(),
                                ],
                            ),
                            "secret_file" => file("File holding the HS256 secret."),
                            "public_key" => string("RS256 or ES256 public key, PEM.").into(),
                            "public_key_file" => file("File holding the PEM public key."),
                            _ => return None,
                        })
                    },
                ),
                "mtls" => object(
                    "Which client certificates are the app's (default: subject CN equal to id).",
                    tls::MTLS_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "names" => list("Subject CN or DNS names (case-insensitive).", string("A name.")),
                            "sha256" => list(
                                "SHA-256 fingerprints of certificates: 64 hex digits, or pairs joined by colons.",
                                pattern("A fingerprint.", "^([0-9A-Fa-f]{64}|([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2})$"),
                            ),
                            _ => return None,
                        })
                    },
                ),
                _ => return None,
            })
        },
    )
}

// ---- the top level ----

fn listener_tls() -> S {
    object(
        "TLS on a listener.",
        listen::TLS_KEYS,
        &["certificates"],
        |k| {
            Some(match k {
                "certificates" => ArrayBuilder::new()
                    .description(Some("Certificates picked by SNI; at least one."))
                    .min_items(Some(1))
                    .items(ArrayItemsOf(object(
                        "A PEM certificate chain and its key (file paths).",
                        listen::CERT_KEYS,
                        &["cert", "key"],
                        |k| {
                            Some(match k {
                                "cert" => file("PEM certificate chain, leaf first."),
                                "key" => file("Its PEM private key."),
                                _ => return None,
                            })
                        },
                    )))
                    .into(),
                "default" => {
                    file("The cert served without a matching name (one of the cert paths).")
                }
                "client_ca" => file("PEM CA bundle client certificates must chain to."),
                "client_auth" => with_default(
                    choice(
                        "Whether a client certificate is required (with client_ca).",
                        &["require", "request"],
                    ),
                    json!("require"),
                ),
                "min_version" => with_default(
                    choice("The lowest TLS version.", &["1.2", "1.3"]),
                    json!("1.2"),
                ),
                _ => return None,
            })
        },
    )
}

fn listen_addr(d: &str) -> ObjectBuilder {
    pattern(d, r"^(\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]):\d{1,5}$")
}

fn listener() -> S {
    any_of(
        "A listener: an address IP:port (plain HTTP), or its settings.",
        vec![
            listen_addr("IP:port.").into(),
            object("A listener.", listen::LISTENER_KEYS, &["addr"], |k| {
                Some(match k {
                    "addr" => listen_addr("Where to listen, IP:port.").into(),
                    "tls" => r("ListenerTls"),
                    "proxy_protocol" => boolean(
                        "Each connection begins with a PROXY protocol header.",
                        false,
                    )
                    .into(),
                    "redirect_https" => boolean(
                        "Redirect every request to https (plain listeners only).",
                        false,
                    )
                    .into(),
                    "http2" => boolean("Clients may speak HTTP/2.", true).into(),
                    "h2c" => boolean("http2 under its plain-listener name.", true).into(),
                    _ => return None,
                })
            }),
        ],
    )
}

fn top(k: &str) -> Option<S> {
    Some(match k {
        "listen" => any_of(
            "Where clients connect: an address, or a list of listeners.",
            vec![
                listen_addr("IP:port.").into(),
                ArrayBuilder::new()
                    .min_items(Some(1))
                    .items(ArrayItemsOf(listener()))
                    .into(),
            ],
        ),
        "admin" => object(
            "The admin listener (metrics, health, this API).",
            listen::ADMIN_KEYS,
            &["listen"],
            |k| {
                Some(match k {
                    "listen" => listen_addr("The admin address, IP:port.").into(),
                    "tokens" => list(
                        "Bearer tokens of the API.",
                        object(
                            "A token.",
                            listen::ADMIN_TOKEN_KEYS,
                            &["token_file", "role"],
                            |k| {
                                Some(match k {
                                    "token_file" => file("File holding the token."),
                                    "role" => choice("read: GET only; write: everything.", &["read", "write"]).into(),
                                    _ => return None,
                                })
                            },
                        ),
                    ),
                    "read_only" => boolean("Every write answers 405.", false).into(),
                    "tls" => r("ListenerTls"),
                    _ => return None,
                })
            },
        ),
        "workers" => any_of(
            "Worker threads: auto (one per core) or a number.",
            vec![
                choice("One per core.", &["auto"]).into(),
                int("Threads.", 1, None).into(),
            ],
        ),
        "busy_poll" => any_of(
            "How long a worker polls after a request instead of sleeping: off, or a duration up to 1s.",
            vec![
                choice("Off.", &["off", "Off", "OFF"]).into(),
                ObjectBuilder::new().schema_type(Type::Boolean).enum_values(Some([false])).into(),
                r("Duration"),
            ],
        ),
        "limits" => object(
            "Connection and request size limits.",
            decode::LIMITS_KEYS,
            &[],
            |k| {
                Some(match k {
                    "max_connections" => with_default(int("Client connections at once, per process.", 1, None), json!(10000)),
                    "max_header_bytes" => size("Largest request head, 1024 to 1048576.", json!(16384)),
                    "max_body_bytes" => size("Largest request body.", json!("10MiB")),
                    "max_tunnels" => with_default(int("Upgraded connections at once, per process.", 1, None), json!(10000)),
                    _ => return None,
                })
            },
        ),
        "timeouts" => object(
            "Client-side timeouts.",
            decode::TIMEOUTS_KEYS,
            &[],
            |k| {
                Some(match k {
                    "client_header" => dur("To receive a whole request head.", Some("10s")),
                    "client_body" => dur("Longest pause within a request body.", Some("30s")),
                    "keepalive" => dur("How long an idle client connection stays open.", Some("60s")),
                    "drain" => dur("On shutdown, how long requests under way may take.", Some("10s")),
                    "client_write" => dur("Longest a write may wait for the client to read.", Some("30s")),
                    "tls_handshake" => dur("Time allowed for a TLS handshake.", Some("10s")),
                    "tunnel_idle" => dur("An upgraded connection idle this long is closed.", Some("1h")),
                    _ => return None,
                })
            },
        ),
        "log" => object("The gateway's log.", decode::LOG_KEYS, &[], |k| {
            Some(match k {
                "level" => with_default(
                    pattern(
                        "Level of the gateway's own log: error, warn, info, debug or trace (any case).",
                        &any_case(&["error", "warn", "info", "debug", "trace"]),
                    ),
                    json!("info"),
                ),
                "format" => with_default(
                    choice("The gateway's own log: text lines or one JSON object a line.", &["text", "json"]),
                    json!("text"),
                ),
                "access" => any_of(
                    "The access log: off (or false), stdout, or a file path.",
                    vec![
                        string("off, stdout or a file path.").min_length(Some(1)).into(),
                        ObjectBuilder::new().schema_type(Type::Boolean).enum_values(Some([false])).into(),
                    ],
                ),
                _ => return None,
            })
        }),
        "reload" => object("Watching the config file.", decode::RELOAD_KEYS, &[], |k| {
            Some(match k {
                "watch" => boolean("Reload when the file changes.", true).into(),
                "poll_interval" => dur("How often the file is checked.", Some("1s")),
                _ => return None,
            })
        }),
        "services" => list("Backend services.", r("Service")),
        "routes" => list("Routes, in order.", r("Route")),
        "plans" => map_of("Named limits for apps, by plan name.", r("Plan")),
        "apps" => list("The applications that call auth routes.", r("App")),
        "app_key" => object(
            "Where auth: app_key routes look for the key; one source at least stays on.",
            apps::APP_KEY_KEYS,
            &[],
            |k| {
                Some(match k {
                    "header" => with_default(pattern("Header carrying the key, or off.", TOKEN), json!("X-App-Key")),
                    "query" => with_default(string("Query parameter carrying the key, or off."), json!("app_key")),
                    "path_segment" => boolean("Accept /prefix/~KEY/rest.", true).into(),
                    _ => return None,
                })
            },
        ),
        "ip" => utoipa::openapi::schema::AllOfBuilder::new()
            .item(r("IpRules"))
            .description(Some("Client addresses allowed and denied on every request."))
            .into(),
        "jwt" => object("How auth: jwt routes check tokens.", jwt::JWT_KEYS, &[], |k| {
            Some(match k {
                "issuer" => string("Tokens must carry this iss.").into(),
                "audience" => string("Tokens must carry this aud.").into(),
                "app_claim" => with_default(string("The claim holding the app's id."), json!("sub")),
                "leeway" => dur("Clock skew allowed on exp and nbf.", Some("30s")),
                _ => return None,
            })
        }),
        "trusted_proxies" => list(
            "Proxies whose X-Forwarded-For is believed (address blocks).",
            pattern("An address block ADDR/LEN, or one address.", BLOCK),
        ),
        "http2" => object("Client HTTP/2 connections.", http2::HTTP2_KEYS, &[], |k| {
            Some(match k {
                "max_concurrent_streams" => with_default(int("Streams open at once per connection.", 1, Some(100_000)), json!(128)),
                "stream_window" => size("Each stream's receive window, 65535 to 2147483647.", json!("1MiB")),
                "connection_window" => size("The connection's receive window, 65535 to 2147483647.", json!("4MiB")),
                "max_streams_per_second" => with_default(int("New streams per connection per second.", 1, Some(10_000_000)), json!(10000)),
                _ => return None,
            })
        }),
        "config_source" => object(
            "Keep the resources in etcd (takes effect at start).",
            source::SOURCE_KEYS,
            &["etcd"],
            |k| {
                Some(match k {
                    "etcd" => object("The etcd cluster.", source::ETCD_KEYS, &["endpoints"], |k| {
                        Some(match k {
                            "prefix" => with_default(pattern("The key prefix, starting and ending with /.", "^/(.*/)?$"), json!("/sluicegate/")),
                            "cache" => file("Where the last applied config is kept."),
                            _ => return etcd_connection_key(k),
                        })
                    }),
                    _ => return None,
                })
            },
        ),
        "dns" => object(
            "How endpoints given by host name and discovery.dns_srv are resolved.",
            discovery::DNS_KEYS,
            &[],
            |k| {
                Some(match k {
                    "servers" => list(
                        "Name servers (IP:port); none: those of /etc/resolv.conf.",
                        string("IP:port, e.g. 127.0.0.1:53 or [::1]:53.").min_length(Some(1)),
                    ),
                    "min_ttl" => dur("Shortest time an answer is kept (at least 10ms).", Some("1s")),
                    "max_ttl" => dur("Longest time an answer is kept.", Some("5m")),
                    _ => return None,
                })
            },
        ),
        "request_id" => object("Request ids.", trace::REQUEST_ID_KEYS, &[], |k| {
            Some(match k {
                "header" => with_default(
                    pattern(
                        "The header that carries a request's id (kept from trusted proxies, made otherwise).",
                        "^[A-Za-z0-9_-]{1,48}$",
                    ),
                    json!("x-request-id"),
                ),
                _ => return None,
            })
        }),
        "tracing" => object(
            "OpenTelemetry spans of sampled requests, exported over OTLP/gRPC.",
            trace::TRACING_KEYS,
            &["otlp"],
            |k| {
                Some(match k {
                    "service_name" => with_default(
                        string("The service name of the spans.").min_length(Some(1)),
                        json!("sluicegate"),
                    ),
                    "sampling" => object("Which requests get a span.", trace::SAMPLING_KEYS, &[], |k| {
                        Some(match k {
                            "ratio" => any_of(
                                "Share of requests without a sampled parent that are traced, 0 to 1 (a fraction reads back as a string).",
                                vec![
                                    ObjectBuilder::new()
                                        .schema_type(Type::Number)
                                        .minimum(Some(0.0))
                                        .maximum(Some(1.0))
                                        .default(Some(json!(0)))
                                        .into(),
                                    pattern("A number from 0 to 1.", r"^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$").into(),
                                ],
                            ),
                            _ => return None,
                        })
                    }),
                    "otlp" => object("Where spans go.", trace::OTLP_KEYS, &["endpoint"], |k| {
                        Some(match k {
                            "endpoint" => pattern("The collector's OTLP/gRPC URL (http://host:port).", "^http://").into(),
                            "timeout" => dur("Longest an export may take.", Some("10s")),
                            _ => return None,
                        })
                    }),
                    "queue" => with_default(
                        int("Spans waiting for export at most; more are dropped and counted.", 1, Some(1 << 20)),
                        json!(2048),
                    ),
                    _ => return None,
                })
            },
        ),
        "cluster" => object("What a fleet shares.", cluster::CLUSTER_KEYS, &[], |k| {
            Some(match k {
                "etcd" => object(
                    "The etcd of discovery.etcd (default: that of config_source.etcd).",
                    source::ETCD_CONNECTION_KEYS,
                    &["endpoints"],
                    etcd_connection_key,
                ),
                "redis" => object(
                    "The Redis of scope: global limits.",
                    cluster::REDIS_KEYS,
                    &["url"],
                    |k| {
                        Some(match k {
                            "url" => pattern("redis://host[:port][/db] or rediss://..., no password.", "^rediss?://").into(),
                            "tls" => boolean("Speak TLS (true for rediss://).", false).into(),
                            "password_file" => file("File holding the password."),
                            "ca_file" => file("PEM bundle of the CA that signs Redis's certificate (with tls; default: the system's roots)."),
                            "cluster" => boolean("The server is a Redis Cluster.", false).into(),
                            _ => return None,
                        })
                    },
                ),
                _ => return None,
            })
        }),
        _ => return None,
    })
}

/// The keys that say how to reach etcd (`config_source.etcd`, `cluster.etcd`).
fn etcd_connection_key(k: &str) -> Option<S> {
    Some(match k {
        "endpoints" => ArrayBuilder::new()
            .description(Some("etcd client URLs; at least one."))
            .min_items(Some(1))
            .items(pattern(
                "http://HOST:PORT or https://HOST:PORT.",
                "^https?://",
            ))
            .into(),
        "tls" => object("TLS to etcd.", source::ETCD_TLS_KEYS, &[], |k| {
            Some(match k {
                "ca" => file("PEM bundle that signs etcd's certificate."),
                "cert" => file("Client certificate (with key)."),
                "key" => file("Its private key."),
                _ => return None,
            })
        }),
        "username" => string("etcd user; with password_file.").into(),
        "password_file" => file("File holding the user's password."),
        _ => return None,
    })
}

/// The resource sections: each has its own schema and API path.
pub const SECTIONS: [&str; 4] = ["services", "routes", "apps", "plans"];

/// The whole config (`all`), or the settings: every top-level key but the
/// resource sections.
fn top_level(all: bool) -> S {
    if all {
        object("A whole config.", decode::TOP_KEYS, &["listen"], top)
    } else {
        object(
            "The settings: every top-level key but services, routes, apps and plans.",
            settings_keys(),
            &["listen"],
            top,
        )
    }
}

/// The top-level keys that are settings, leaked once (they are the same
/// for the life of the process).
fn settings_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        decode::TOP_KEYS
            .iter()
            .copied()
            .filter(|k| !SECTIONS.contains(k))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(schema: &Value) -> Vec<String> {
        let mut v: Vec<String> = schema["properties"]
            .as_object()
            .expect("an object schema")
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    /// Building every schema runs `object` over every key list: a key a
    /// decoder reads that has no schema panics here (a debug assertion).
    #[test]
    fn every_decoder_key_has_a_schema_and_no_other_key_is_allowed() {
        let all: serde_json::Map<String, Value> = components()
            .into_iter()
            .map(|(n, s)| (n.to_string(), serde_json::to_value(s).unwrap()))
            .collect();
        let cases: &[(&str, &[&str])] = &[
            ("Service", service::SERVICE_KEYS),
            ("Route", route::ROUTE_KEYS),
            ("App", apps::APP_KEYS),
            ("Plan", apps::PLAN_KEYS),
            ("Config", decode::TOP_KEYS),
            ("HeaderOps", policy::OPS_KEYS),
            ("IpRules", policy::IP_KEYS),
            ("ListenerTls", listen::TLS_KEYS),
        ];
        for (name, keys) in cases {
            assert_eq!(props(&all[*name]), sorted(keys), "{name}");
            assert_eq!(all[*name]["additionalProperties"], json!(false), "{name}");
        }
        let mut plan_item = apps::PLAN_KEYS.to_vec();
        plan_item.push("name");
        assert_eq!(props(&all["PlanItem"]), sorted(&plan_item));
        let settings: Vec<&str> = decode::TOP_KEYS
            .iter()
            .copied()
            .filter(|k| !SECTIONS.contains(k))
            .collect();
        assert_eq!(props(&all["Settings"]), sorted(&settings));
        // Nested ones, reached through the tree.
        let svc = &all["Service"]["properties"];
        assert_eq!(
            props(&svc["timeouts"]),
            sorted(service::SERVICE_TIMEOUT_KEYS)
        );
        assert_eq!(props(&svc["health"]), sorted(health::HEALTH_KEYS));
        assert_eq!(props(&svc["retries"]), sorted(resilience::RETRY_KEYS));
        assert_eq!(props(&svc["breaker"]), sorted(resilience::BREAKER_KEYS));
        assert_eq!(
            props(&svc["ejection"]["anyOf"][1]),
            sorted(resilience::EJECTION_KEYS)
        );
        assert_eq!(
            props(&svc["tls"]["anyOf"][1]),
            sorted(tls::UPSTREAM_TLS_KEYS)
        );
        assert_eq!(
            props(&svc["endpoints"]["items"]["anyOf"][1]),
            sorted(service::ENDPOINT_KEYS)
        );
        let route = &all["Route"]["properties"];
        assert_eq!(props(&route["match"]), sorted(route::matcher::MATCH_KEYS));
        assert_eq!(props(&route["respond"]), sorted(route::RESPOND_KEYS));
        assert_eq!(props(&route["limit"]), sorted(apps::ROUTE_LIMIT_KEYS));
        assert_eq!(props(&route["cors"]), sorted(policy::CORS_KEYS));
        assert_eq!(props(&route["rewrite"]), sorted(route::REWRITE_KEYS));
        let app = &all["App"]["properties"];
        assert_eq!(props(&app["jwt"]), sorted(jwt::APP_JWT_KEYS));
        assert_eq!(props(&app["mtls"]), sorted(tls::MTLS_KEYS));
        let top = &all["Config"]["properties"];
        assert_eq!(props(&top["admin"]), sorted(listen::ADMIN_KEYS));
        assert_eq!(
            props(&top["admin"]["properties"]["tokens"]["items"]),
            sorted(listen::ADMIN_TOKEN_KEYS)
        );
        assert_eq!(props(&top["limits"]), sorted(decode::LIMITS_KEYS));
        assert_eq!(props(&top["timeouts"]), sorted(decode::TIMEOUTS_KEYS));
        assert_eq!(props(&top["log"]), sorted(decode::LOG_KEYS));
        assert_eq!(props(&top["reload"]), sorted(decode::RELOAD_KEYS));
        assert_eq!(props(&top["app_key"]), sorted(apps::APP_KEY_KEYS));
        assert_eq!(props(&top["jwt"]), sorted(jwt::JWT_KEYS));
        assert_eq!(props(&top["http2"]), sorted(http2::HTTP2_KEYS));
        assert_eq!(
            props(&top["listen"]["anyOf"][1]["items"]["anyOf"][1]),
            sorted(listen::LISTENER_KEYS)
        );
        let etcd = &top["config_source"]["properties"]["etcd"];
        assert_eq!(props(&top["config_source"]), sorted(source::SOURCE_KEYS));
        assert_eq!(props(etcd), sorted(source::ETCD_KEYS));
        assert_eq!(
            props(&etcd["properties"]["tls"]),
            sorted(source::ETCD_TLS_KEYS)
        );
        assert_eq!(props(&top["cluster"]), sorted(cluster::CLUSTER_KEYS));
        assert_eq!(
            props(&top["cluster"]["properties"]["redis"]),
            sorted(cluster::REDIS_KEYS)
        );
        assert_eq!(
            props(&top["cluster"]["properties"]["etcd"]),
            sorted(source::ETCD_CONNECTION_KEYS)
        );
        let certs = &all["ListenerTls"]["properties"]["certificates"]["items"];
        assert_eq!(props(certs), sorted(listen::CERT_KEYS));
    }

    /// Every `fields(..)` call of the decoders reads its keys from a named
    /// list (not a literal), and a schema here is built from that list.
    #[test]
    fn every_decoder_reads_its_keys_from_a_named_list() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let this = std::fs::read_to_string(src.join("schema.rs")).unwrap();
        let mut calls = 0;
        for dir in [src.clone(), src.join("route")] {
            for e in std::fs::read_dir(dir).unwrap() {
                let file = e.unwrap().path();
                if file.extension().is_none_or(|x| x != "rs") || file.ends_with("schema.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&file).unwrap();
                let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
                for call in flat.split(" fields(").skip(1) {
                    if call.starts_with("cx: &mut Cx") {
                        continue; // the definition
                    }
                    let args = call.split(')').next().unwrap();
                    let last = args
                        .rsplit(',')
                        .map(str::trim)
                        .find(|a| !a.is_empty())
                        .unwrap();
                    assert!(
                        last.ends_with("KEYS"),
                        "{}: fields(..{last})",
                        file.display()
                    );
                    let name = last.rsplit("::").next().unwrap();
                    assert!(
                        this.contains(name),
                        "{}: {name} has no schema",
                        file.display()
                    );
                    calls += 1;
                }
            }
        }
        assert!(calls >= 30, "{calls}");
    }
}
