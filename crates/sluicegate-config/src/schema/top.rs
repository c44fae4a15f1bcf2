//! The schemas of the top-level settings: listeners and their TLS, and
//! every top-level key of a whole config (`top`).

use super::*;

pub(super) fn listener_tls() -> S {
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

pub(super) fn listen_addr(d: &str) -> ObjectBuilder {
    pattern(d, r"^(\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]):\d{1,5}$")
}

pub(super) fn listener() -> S {
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

pub(super) fn top(k: &str) -> Option<S> {
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
        "io_uring" => boolean(
            "Plain TCP through one io_uring per worker instead of epoll (read at start; falls back to epoll where the kernel refuses it).",
            false,
        )
        .into(),
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
                "leeway" => dur("Clock skew allowed on exp, nbf and iat.", Some("30s")),
                "close_on_expiry" => boolean("End a tunnel or stream admitted with a token when the token expires (exp plus leeway).", true).into(),
                "issuers" => list(
                    "OpenID Connect issuers whose tokens are checked with the keys of their JWKS.",
                    object(
                        "An issuer.",
                        jwt::ISSUER_KEYS,
                        &["name", "issuer", "audiences"],
                        |k| {
                            Some(match k {
                                "name" => name_schema(),
                                "issuer" => pattern("The tokens' iss: an http(s) URL.", "^https?://[^/\\s]").into(),
                                "discovery" => boolean("Read jwks_uri from {issuer}/.well-known/openid-configuration.", false).into(),
                                "jwks_uri" => pattern("The key set's http(s) URL (without discovery).", "^https?://[^/\\s]").into(),
                                "audiences" => ArrayBuilder::new()
                                    .description(Some("The token's aud must hold one of them."))
                                    .min_items(Some(1))
                                    .items(string("An audience."))
                                    .into(),
                                "app_claim" => string("The claim naming the app (default: client_id, then azp).").into(),
                                "default_plan" => string("The plan of apps the issuer names that are not under apps; without it they are refused (403).").into(),
                                "claims_to_headers" => ObjectBuilder::new()
                                    .schema_type(Type::Object)
                                    .description(Some("Claims sent upstream, by claim name: the header to send each in (clients' copies are removed)."))
                                    .additional_properties(Some(AdditionalProperties::RefOr(pattern("A header name.", TOKEN).into())))
                                    .into(),
                                "ca_file" => file("PEM CA bundle trusted for the issuer's HTTPS, beside the system's roots."),
                                "introspection" => object(
                                    "RFC 7662 introspection of the bearer tokens that are not JWTs (one issuer at most).",
                                    jwt::INTROSPECTION_KEYS,
                                    &["client_id", "client_secret_file"],
                                    |k| {
                                        Some(match k {
                                            "client_id" => string("The gateway's client id at the issuer (HTTP Basic).").into(),
                                            "client_secret_file" => file("File holding the client's secret."),
                                            "cache" => dur("How long an answer (active or not) is kept at most; never past the token's exp.", Some("60s")),
                                            "endpoint" => pattern("The introspection endpoint's http(s) URL (default: discovery's introspection_endpoint).", "^https?://[^/\\s]").into(),
                                            _ => return None,
                                        })
                                    },
                                ),
                                _ => return None,
                            })
                        },
                    ),
                ),
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
                            "leader_ttl" => dur("The lease of the gateway that runs the rollouts (whole seconds, at least 2s): a leader that stops is replaced after it.", Some("10s")),
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
        "cache" => object(
            "The HTTP cache's store, shared by every route with a cache: bounded in memory, the least useful objects evicted first.",
            crate::cache::CACHE_KEYS,
            &["memory"],
            |k| {
                Some(match k {
                    "memory" => utoipa::openapi::schema::AllOfBuilder::new()
                        .item(r("Size"))
                        .description(Some("The bound of the store, everything of an object counted (at least 1MiB)."))
                        .into(),
                    "max_object" => size("Larger answers pass through uncached (at most memory).", json!("8MiB")),
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
                            "endpoint" => pattern("The collector's OTLP/gRPC URL: http://host:port, or https://host:port for TLS.", "^https?://").into(),
                            "timeout" => dur("Longest an export may take.", Some("10s")),
                            "ca_file" => file("PEM bundle of the CAs that sign the collector's certificate (with https://; default: the system's roots)."),
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
pub(super) fn etcd_connection_key(k: &str) -> Option<S> {
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
