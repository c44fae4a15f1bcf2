//! The schemas of the resources the admin API serves one by one: services
//! (with endpoints and health checks), routes, plans and apps.

use super::*;

pub(super) fn service() -> S {
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
                        &["round_robin", "least_conn", "p2c_ewma", "hash", "random"],
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

pub(super) fn name(d: &str) -> S {
    utoipa::openapi::schema::AllOfBuilder::new()
        .item(r("Name"))
        .description(Some(d))
        .into()
}

pub(super) fn endpoint() -> S {
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

pub(super) fn health() -> S {
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

pub(super) fn route() -> S {
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
                            "path" => pattern(
                                "The path must equal this; or, with {name} or {name:TYPE} segments (TYPE: int, uint, uuid, hex, alpha, alnum, regex(...), or * for the rest of the path, last), a template whose parameters ${name} in rewrite.replacement and request_headers, and limit.per: param:NAME, may use.",
                                PATH_TEMPLATE,
                            )
                            .into(),
                            "path_prefix" => pattern("The path must start with this, segment by segment.", PATH).into(),
                            "path_regex" => string("The path must match this regular expression.").into(),
                            "methods" => methods("The request's method must be one of these."),
                            "headers" => header_map("Each header's first field must have exactly this value, or, for a value ~REGEX, a value the regex matches whole."),
                            "query" => map_of("Each query parameter's first occurrence must have this value (both decoded: %XX, and + as a space).", scalar("The parameter's value.")),
                            "cookies" => map_of("Each cookie's first occurrence in the Cookie field(s) must have exactly this value.", scalar("The cookie's value.")),
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
                            "per" => with_default(pattern("Counters per client address (client_ip), one set for the route (route), per authenticated app (app; runs after auth), per value of a request header (header:NAME; its first copy), per value of a claim of the verified token (claim:NAME; auth: jwt routes; runs after auth) or per value of a parameter of the route's path template (param:NAME). Requests without the value share one set.", r"^(client_ip|route|app|header:[!#$%&'*+.^_`|~0-9A-Za-z-]+|claim:.+|param:[A-Za-z_][A-Za-z0-9_]*)$"), json!("client_ip")),
                            "scope" => with_default(choice("local: per process; global: across the fleet, in Redis (needs a rate).", &["local", "global"]), json!("local")),
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
                                "The replacement; $1 and ${name} name capture groups, and ${name} that is no group a parameter of the path template. No spaces, control characters, ? or #.",
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
                "fault" => fault(),
                "mirror" => mirror(),
                "compress" => compress(),
                "scopes" => list(
                    "Scopes the token must hold, all of them (auth: jwt only): in its scope (space-separated) or scp claim.",
                    pattern("A scope.", r#"^[!#-\[\]-~]+$"#),
                ),
                "split" => split(),
                "split_by" => with_default(
                    pattern(
                        "What keeps a client on one service of the split: random (each request drawn), client_ip, app, header:NAME, cookie:NAME or param:NAME (a parameter of the route's path template); a request without the key is drawn at random.",
                        r"^(random|client_ip|app|header:[!#$%&'*+.^_`|~0-9A-Za-z-]+|cookie:[!#$%&'*+.^_`|~0-9A-Za-z-]+|param:[A-Za-z_][A-Za-z0-9_]*)$",
                    ),
                    json!("random"),
                ),
                "rollout" => rollout(),
                "aggregate" => aggregate(),
                "fallback" => object(
                    "What answers when the service cannot (no endpoint up, circuit open, connects or retries used up, no response head in time, an invalid one): a fixed answer (status, body, headers) or another service, exactly one; answers carry Sluicegate-Fallback: 1 (only with service).",
                    route::fallback::FALLBACK_KEYS,
                    &[],
                    |k| {
                        Some(match k {
                            "status" => with_default(int("The fixed answer's status.", 200, Some(599)), json!(200)),
                            "body" => scalar("The fixed answer's body (none for 204, 304)."),
                            "headers" => header_map("The fixed answer's headers (not Content-Length nor Transfer-Encoding)."),
                            "service" => name("Send the request to this other service instead, once."),
                            _ => return None,
                        })
                    },
                ),
                "cache" => cache(),
                "forward_auth" => forward_auth(),
                "ext_authz" => ext_authz(),
                "fallback_on" => list(
                    "Upstream statuses answered by the fallback too (needs fallback): 5xx, or single statuses from 500 to 599.",
                    any_of(
                        "5xx, or a status.",
                        vec![
                            pattern("Any status from 500 to 599.", "^5[xX][xX]$").into(),
                            int("A status.", 500, Some(599)).into(),
                        ],
                    ),
                ),
                _ => return None,
            })
        },
    )
}

/// A route's `forward_auth`: an HTTP service asked about each request.
fn forward_auth() -> S {
    object(
        "Each request is first asked about with a GET to url (after auth): a 2xx answer lets it through with response_headers copied onto it, any other answer goes to the client as the service sent it (only with service).",
        route::authz::FORWARD_AUTH_KEYS,
        &["url"],
        |k| {
            Some(match k {
                "url" => pattern(
                    "http:// or https://, then an IP address (IPv6 in brackets) with an optional port, or a service's name; then the path and query.",
                    r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s@#]+$",
                )
                .into(),
                "request_headers" => ArrayBuilder::new()
                    .description(Some("Request headers sent to the service, besides X-Forwarded-Method, -Uri, -Host, -Proto and -For."))
                    .items(ArrayItemsOf(pattern("A header name.", "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$").into()))
                    .unique_items(true)
                    .default(Some(json!(["authorization", "cookie"])))
                    .into(),
                "response_headers" => ArrayBuilder::new()
                    .description(Some("Headers of a 2xx answer copied onto the request upstream; the client's own copies are removed first."))
                    .items(ArrayItemsOf(pattern("A header name.", "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$").into()))
                    .unique_items(true)
                    .default(Some(json!([])))
                    .into(),
                "cache" => any_of(
                    "How long a decision (allow or deny) is reused for the same request headers, method, URI, host and client; 0: never. At most 24h.",
                    vec![
                        r("Duration"),
                        pattern("Zero: no cache.", "^0+([a-zµ]*)$").into(),
                    ],
                ),
                "timeout" => dur("Longest wait for the service's whole answer.", Some("1s")),
                "on_error" => with_default(choice("When the service cannot answer in time: deny (503) or allow (without the copied headers).", &["deny", "allow"]), json!("deny")),
                _ => return None,
            })
        },
    )
}

/// A route's `ext_authz`: Envoy's gRPC Authorization/Check (v3).
fn ext_authz() -> S {
    object(
        "Each request is first checked by Envoy's envoy.service.auth.v3.Authorization/Check over gRPC (the service must speak HTTP/2: protocol h2c or h2); only with service.",
        route::authz::EXT_AUTHZ_KEYS,
        &["service"],
        |k| {
            Some(match k {
                "service" => name("The service that answers the checks."),
                "timeout" => dur("Longest wait for the check's answer.", Some("1s")),
                "on_error" => with_default(choice("When the service cannot answer in time: deny (503) or allow.", &["deny", "allow"]), json!("deny")),
                _ => return None,
            })
        },
    )
}

/// A route's `cache`: its answers stored and served from the store.
fn cache() -> S {
    object(
        "Answers of the service stored in the cache (the top-level cache) and served from it by RFC 9111's rules for a shared cache (only with service).",
        crate::cache::ROUTE_CACHE_KEYS,
        &[],
        |k| {
            Some(match k {
                "key" => ArrayBuilder::new()
                    .description(Some("What makes two requests the same object, in order: host, path, query, app (needs auth), header:NAME; each once."))
                    .min_items(Some(1))
                    .unique_items(true)
                    .items(ArrayItemsOf(pattern(
                        "A key part.",
                        r"^(host|path|query|app|header:[!#$%&'*+.^_`|~0-9A-Za-z-]+)$",
                    ).into()))
                    .default(Some(json!(["host", "path", "query"])))
                    .into(),
                "default_ttl" => dur("Freshness of an answer whose upstream gives none (heuristically cacheable statuses only); 0s: not stored. At most 168h.", Some("0s")),
                "stale_while_revalidate" => dur("How long past its freshness a stale object is served at once while one background fetch refreshes it. At most 168h.", Some("0s")),
                "stale_if_error" => dur("How long past its freshness a stale object is served while the upstream fails or answers 5xx. At most 168h.", Some("0s")),
                "tags_header" => pattern("The response header whose comma-separated values tag the object for purging.", "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$").into(),
                _ => return None,
            })
        },
    )
}

/// A share of a route's requests, 0 to 100, with its default if it has
/// one. A fraction is written back as text (documents keep only whole
/// numbers as JSON numbers): either form.
fn percent(default: Option<Value>) -> S {
    AnyOfBuilder::new()
        .description(Some("Share of the requests, 0 to 100 (fractions allowed)."))
        .item(
            ObjectBuilder::new()
                .schema_type(Type::Number)
                .minimum(Some(0.0))
                .maximum(Some(100.0)),
        )
        .item(pattern(
            "A percentage as text.",
            r"^(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)$",
        ))
        .default(default)
        .into()
}

/// A route's `mirror`: the service that gets a copy of a share of its
/// requests.
fn mirror() -> S {
    object(
        "A copy of a share of the requests (body included) to another service, its answer dropped (only with service).",
        route::mirror::MIRROR_KEYS,
        &["service"],
        |k| {
            Some(match k {
                "service" => name("The service that gets the copies."),
                "percent" => percent(Some(json!(100))),
                _ => return None,
            })
        },
    )
}

/// A route's `compress`: `true`, `false`, or its settings.
fn compress() -> S {
    let settings = object(
        "Response compression settings; absent keys take their defaults.",
        route::compress::COMPRESS_KEYS,
        &[],
        |k| {
            Some(match k {
                "algorithms" => ArrayBuilder::new()
                    .description(Some(
                        "Codings offered, in order of preference (ties of the client's q-values go to the first); each once.",
                    ))
                    .items(ArrayItemsOf(choice("A coding.", &["zstd", "br", "gzip"]).into()))
                    .min_items(Some(1))
                    .default(Some(json!(["zstd", "br", "gzip"])))
                    .into(),
                "min_size" => size(
                    "Bodies with a smaller Content-Length are left alone; a body without one is compressed.",
                    json!("1KiB"),
                ),
                "types" => ArrayBuilder::new()
                    .description(Some(
                        "Media types compressed: type/subtype, type/* or type/*+suffix (case-insensitive, parameters ignored).",
                    ))
                    .items(ArrayItemsOf(
                        pattern(
                            "A media type or range.",
                            r"^[A-Za-z0-9!#$%&'+.^_`|~-]+/(\*|(\*\+)?[A-Za-z0-9!#$%&'+.^_`|~-]+)$",
                        )
                        .into(),
                    ))
                    .min_items(Some(1))
                    .default(Some(json!(crate::model::Compress::DEFAULT_TYPES)))
                    .into(),
                "level" => any_of(
                    "fast, default or best (mapped per coding), or one integer level for every coding listed (gzip 1-9, br 0-11, zstd 1-19).",
                    vec![
                        choice("A named level.", &["fast", "default", "best"]).into(),
                        int("A level within every listed coding's range.", 0, Some(19)).into(),
                    ],
                ),
                _ => return None,
            })
        },
    );
    any_of(
        "Response compression in the client's preferred coding (only with service): true for the defaults, or settings.",
        vec![boolean("On with every default, or off.", false).into(), settings],
    )
}

/// A route's `split`: services by weight, instead of `service`.
fn split() -> S {
    ArrayBuilder::new()
        .description(Some(
            "Services sharing the route's requests by weight (instead of service): at least one entry, each service once, some weight above 0.",
        ))
        .min_items(Some(1))
        .items(object(
            "One service of the split.",
            route::split::SPLIT_ENTRY_KEYS,
            &["service", "weight"],
            |k| {
                const MAX: u64 = crate::model::MAX_SPLIT_WEIGHT as u64;
                Some(match k {
                    "service" => name("A service."),
                    "weight" => int("Relative share of requests (0: only pinned apps).", 0, Some(MAX)).into(),
                    "apps" => list("App ids always sent to this service, whatever the weights.", name("An app id.")),
                    _ => return None,
                })
            },
        ))
        .into()
}

/// A route's `aggregate`: the calls whose JSON answers make its answer.
fn aggregate() -> S {
    ArrayBuilder::new()
        .description(Some(
            "Calls to services whose JSON answers make the route's one JSON answer, one member per part (instead of service, split or respond; GET and HEAD only): at least one part, names unique, no cycle between parts.",
        ))
        .min_items(Some(1))
        .items(object(
            "One part: a GET to service at path.",
            route::aggregate::PART_KEYS,
            &["name", "service", "path"],
            |k| {
                Some(match k {
                    "name" => pattern("The part's member in the answer.", "^[A-Za-z_][A-Za-z0-9_]*$").into(),
                    "service" => name("The service called."),
                    "path" => pattern(
                        "Path and query; ${param} is a parameter of match.path, ${part.field} (dotted names, array indexes) a string or number in another part's answer, which this part then waits for.",
                        r"^/[^#\s\u0000-\u001F\u007F]*$",
                    )
                    .into(),
                    "optional" => boolean("A failed optional part is null (and named in Sluicegate-Partial) instead of failing the request with 502.", false).into(),
                    "timeout" => dur("Longest the part may take (default: its service's timeouts.request).", None),
                    _ => return None,
                })
            },
        ))
        .into()
}

/// A route's `fault`: aborts and delays on a share of its requests.
fn fault() -> S {
    object(
        "Aborts and delays injected on a share of the requests (only with service).",
        route::fault::FAULT_KEYS,
        &[],
        |k| {
            Some(match k {
                "abort" => object(
                    "Answer status without contacting the upstream.",
                    route::fault::ABORT_KEYS,
                    &["percent", "status"],
                    |k| {
                        Some(match k {
                            "percent" => percent(None),
                            "status" => int("The answer's status.", 200, Some(599)).into(),
                            _ => return None,
                        })
                    },
                ),
                "delay" => object(
                    "Wait duration before forwarding (bounded by the request's deadline).",
                    route::fault::DELAY_KEYS,
                    &["percent", "duration"],
                    |k| {
                        Some(match k {
                            "percent" => percent(None),
                            "duration" => dur("How long the request waits.", None),
                            _ => return None,
                        })
                    },
                ),
                _ => return None,
            })
        },
    )
}

/// A route's `rollout`: the canary rollout of its split's last entry.
fn rollout() -> S {
    // A fraction is written back as text: either form.
    fn ratio(d: &str) -> S {
        let number: S = ObjectBuilder::new()
            .schema_type(Type::Number)
            .minimum(Some(1.0))
            .into();
        let text: S = pattern("A ratio as text.", r"^[0-9]+(\.[0-9]+)?$").into();
        any_of(d, vec![number, text])
    }
    object(
        "Canary rollout of the split's last entry (needs split with at least 2 entries): its share rises by step percentage points after each window of every judged good, and goes back to 0 after one judged bad.",
        route::rollout::ROLLOUT_KEYS,
        &[],
        |k| {
            Some(match k {
                "step" => with_default(int("Percentage points added per good window.", 1, Some(100)), json!(10)),
                "every" => dur("The window: at least 100ms.", Some("30s")),
                "max_error_ratio" => ratio("Largest canary 5xx rate over the baseline's in a window (at least 1.0; default 2)."),
                "max_p99_ratio" => ratio("Largest canary p99 latency over the baseline's in a window (at least 1.0; default 1.5)."),
                "min_requests" => with_default(int("Requests each side needs in a window before it is judged.", 1, None), json!(100)),
                _ => return None,
            })
        },
    )
}

// ---- plans and apps ----

pub(super) fn plan(named: bool) -> S {
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

pub(super) fn app() -> S {
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
