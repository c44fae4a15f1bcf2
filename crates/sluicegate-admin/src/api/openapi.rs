//! The OpenAPI 3.1 document of the admin API, served at `/openapi.json`.
//!
//! Built with utoipa from the code: the schemas are derived from the types
//! the handlers answer with (the history's `Entry` and `Issue`, and the
//! bodies below), and the per-resource paths come from the same table of
//! kinds the router is built from, so a resource routed is a resource
//! documented.

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, Header, ObjectBuilder, OpenApi as Doc, Ref, RefOr, Required, ResponseBuilder,
    Schema, Type,
};
use utoipa::{OpenApi, ToSchema};

use crate::history::{Entry, Issue, Source};

/// An error answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Error {
    error: String,
    status: u16,
}

/// A refused request or config: every problem with its JSON path.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Problems {
    error: String,
    status: u16,
    problems: Vec<Issue>,
}

/// A write applied: the new config revision (and what the write names).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Written {
    revision: u64,
}

/// A page of a list.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Page {
    items: Vec<Value>,
    total: usize,
    offset: usize,
    limit: usize,
}

/// The reload history, newest first.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Reloads {
    reloads: Vec<Entry>,
}

/// `/healthz`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Health {
    status: String,
    config_generation: u64,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sluicegate admin API",
        description = "Read and change the running config of a Sluicegate gateway. See docs/admin-api.md."
    ),
    components(schemas(Error, Problems, Written, Page, Reloads, Health, Entry, Issue, Source))
)]
struct Base;

/// One operation to document.
struct Op<'a> {
    path: &'a str,
    method: HttpMethod,
    id: String,
    summary: String,
    /// The request body's content types, if it takes one.
    body: &'a [&'a str],
    /// The success status, what it answers, and its schema.
    ok: (&'a str, &'a str, Option<&'a str>),
    /// Error statuses besides the auth ones.
    errors: &'a [&'a str],
    /// Behind the tokens (`/metrics` and `/healthz` are not).
    auth: bool,
}

fn schema_ref(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

fn any_object() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new().schema_type(Type::Object).build(),
    ))
}

fn add(doc: &mut Doc, op: Op<'_>) {
    let etag = Header::new(RefOr::T(Schema::Object(
        ObjectBuilder::new().schema_type(Type::String).build(),
    )));
    let (status, what, schema) = op.ok;
    let mut ok = ResponseBuilder::new()
        .description(what)
        .header("ETag", etag.clone());
    ok = match schema {
        Some("text") => ok.content("text/plain", ContentBuilder::new().build()),
        Some(name) => ok.content(
            "application/json",
            ContentBuilder::new().schema(Some(schema_ref(name))).build(),
        ),
        None => ok.content(
            "application/json",
            ContentBuilder::new().schema(Some(any_object())).build(),
        ),
    };
    let mut b = OperationBuilder::new()
        .operation_id(Some(op.id))
        .summary(Some(op.summary))
        .response(status, ok.build());
    if status == "200" && op.method == HttpMethod::Put && op.path.contains("{name}") {
        let created = ResponseBuilder::new()
            .description("created")
            .header("ETag", etag.clone())
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(schema_ref("Written")))
                    .build(),
            );
        b = b.response("201", created.build());
    }
    let mut errors: Vec<&str> = op.errors.to_vec();
    if op.auth {
        errors.extend(["401", "403"]);
        b = b.security(SecurityRequirement::new("bearer", Vec::<String>::new()));
    } else {
        // Open: an empty requirement says no token is needed.
        b = b.security(SecurityRequirement::default());
    }
    // Any request whose Content-Length is over the limit is refused.
    if !errors.contains(&"413") {
        errors.push("413");
    }
    for e in errors {
        let schema = if e == "400" { "Problems" } else { "Error" };
        let resp = ResponseBuilder::new()
            .description(describe(e))
            .header("ETag", etag.clone())
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(schema_ref(schema)))
                    .build(),
            );
        b = b.response(e, resp.build());
    }
    if !op.body.is_empty() {
        let mut rb = RequestBodyBuilder::new().required(Some(Required::True));
        for ct in op.body {
            rb = rb.content(
                *ct,
                ContentBuilder::new().schema(Some(any_object())).build(),
            );
        }
        b = b.request_body(Some(rb.build()));
    }
    if op.path.contains("{name}") {
        b = b.parameter(
            ParameterBuilder::new()
                .name("name")
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::String).build(),
                )))),
        );
    }
    if matches!(
        op.method,
        HttpMethod::Put | HttpMethod::Patch | HttpMethod::Delete
    ) {
        b = b.parameter(
            ParameterBuilder::new()
                .name("If-Match")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some("the ETag read: a write over another revision is 412"))
                .schema(Some(RefOr::T(Schema::Object(
                    ObjectBuilder::new().schema_type(Type::String).build(),
                )))),
        );
    }
    if op.ok.2 == Some("Page") {
        for (name, what) in [
            ("limit", "items at most (default 100, at most 1000)"),
            ("offset", "items skipped (default 0)"),
            ("name", "only items whose name contains this"),
        ] {
            let ty = if name == "name" {
                Type::String
            } else {
                Type::Integer
            };
            b = b.parameter(
                ParameterBuilder::new()
                    .name(name)
                    .parameter_in(ParameterIn::Query)
                    .required(Required::False)
                    .description(Some(what))
                    .schema(Some(RefOr::T(Schema::Object(
                        ObjectBuilder::new().schema_type(ty).build(),
                    )))),
            );
        }
    }
    doc.paths
        .add_path_operation(op.path, vec![op.method], b.build());
}

fn describe(status: &str) -> &'static str {
    match status {
        "400" => "invalid: every problem with its JSON path",
        "401" => "no token, or an unknown one",
        "403" => "a read token on a write",
        "404" => "no such item",
        "405" => "the API is read-only (admin.read_only)",
        "412" => "If-Match does not name the running revision",
        "413" => "the body is over 32 MiB",
        _ => "error",
    }
}

/// The whole document.
pub(crate) fn document() -> Doc {
    let mut doc = Base::openapi();
    if let Some(c) = doc.components.as_mut() {
        c.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
    // Relative: the admin listener that serves this document.
    doc.servers = Some(vec![utoipa::openapi::Server::new("/")]);
    const WRITE: &[&str] = &["400", "405", "412", "413"];
    const WRITE_ONE: &[&str] = &["400", "404", "405", "412", "413"];
    let json_yaml: &[&str] = &["application/json", "application/yaml"];
    let json_only: &[&str] = &["application/json"];
    let fixed = [
        Op {
            path: "/metrics",
            method: HttpMethod::Get,
            id: "metrics".into(),
            summary: "Prometheus metrics".into(),
            body: &[],
            ok: ("200", "metrics in the Prometheus text format", Some("text")),
            errors: &[],
            auth: false,
        },
        Op {
            path: "/healthz",
            method: HttpMethod::Get,
            id: "healthz".into(),
            summary: "Liveness and the config revision".into(),
            body: &[],
            ok: ("200", "serving", Some("Health")),
            errors: &[],
            auth: false,
        },
        Op {
            path: "/openapi.json",
            method: HttpMethod::Get,
            id: "openapi".into(),
            summary: "This document".into(),
            body: &[],
            ok: ("200", "the OpenAPI 3.1 document", None),
            errors: &[],
            auth: false,
        },
        Op {
            path: "/config",
            method: HttpMethod::Get,
            id: "getConfig".into(),
            summary: "The whole config (JSON, or YAML by Accept); app keys as fingerprints".into(),
            body: &[],
            ok: ("200", "the config", None),
            errors: &[],
            auth: true,
        },
        Op {
            path: "/config",
            method: HttpMethod::Put,
            id: "putConfig".into(),
            summary: "Replace the whole config atomically".into(),
            body: json_yaml,
            ok: ("200", "applied", Some("Written")),
            errors: WRITE,
            auth: true,
        },
        Op {
            path: "/config/validate",
            method: HttpMethod::Post,
            id: "validateConfig".into(),
            summary: "Check a whole config without applying it".into(),
            body: json_yaml,
            ok: ("200", "valid", None),
            errors: &["400", "413"],
            auth: true,
        },
        Op {
            path: "/reloads",
            method: HttpMethod::Get,
            id: "reloads".into(),
            summary: "The reload history, newest first".into(),
            body: &[],
            ok: ("200", "the history", Some("Reloads")),
            errors: &[],
            auth: true,
        },
        Op {
            path: "/settings",
            method: HttpMethod::Get,
            id: "getSettings".into(),
            summary: "Every top-level setting".into(),
            body: &[],
            ok: ("200", "the settings", None),
            errors: &[],
            auth: true,
        },
        Op {
            path: "/settings",
            method: HttpMethod::Put,
            id: "putSettings".into(),
            summary: "Replace the settings".into(),
            body: json_only,
            ok: ("200", "applied", Some("Written")),
            errors: WRITE,
            auth: true,
        },
        Op {
            path: "/settings",
            method: HttpMethod::Patch,
            id: "patchSettings".into(),
            summary: "Merge-patch the settings".into(),
            body: json_only,
            ok: ("200", "applied", Some("Written")),
            errors: WRITE,
            auth: true,
        },
        Op {
            path: "/certificates",
            method: HttpMethod::Get,
            id: "certificates".into(),
            summary: "The listeners' certificates".into(),
            body: &[],
            ok: ("200", "the certificates", None),
            errors: &[],
            auth: true,
        },
    ];
    for op in fixed {
        add(&mut doc, op);
    }
    for section in super::resources::SECTIONS {
        let one = format!("/{section}/{{name}}");
        let all = format!("/{section}");
        let ops = [
            (
                all.as_str(),
                HttpMethod::Get,
                "list",
                "A page of",
                ("200", "a page", Some("Page")),
                &["400"][..],
                &[][..],
            ),
            (
                one.as_str(),
                HttpMethod::Get,
                "get",
                "One of",
                ("200", "the item", None),
                &["404"][..],
                &[][..],
            ),
            (
                one.as_str(),
                HttpMethod::Put,
                "put",
                "Create or replace one of",
                ("200", "replaced", Some("Written")),
                WRITE,
                json_only,
            ),
            (
                one.as_str(),
                HttpMethod::Patch,
                "patch",
                "Merge-patch one of",
                ("200", "applied", Some("Written")),
                WRITE_ONE,
                json_only,
            ),
            (
                one.as_str(),
                HttpMethod::Delete,
                "delete",
                "Delete one of",
                ("200", "deleted", Some("Written")),
                WRITE_ONE,
                &[][..],
            ),
        ];
        for (path, method, verb, what, ok, errors, body) in ops {
            add(
                &mut doc,
                Op {
                    path,
                    method,
                    id: format!("{verb}{}{}", section[..1].to_uppercase(), &section[1..]),
                    summary: format!("{what} the {section}"),
                    body,
                    ok,
                    errors,
                    auth: true,
                },
            );
        }
    }
    crate::live::openapi::add(&mut doc);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_openapi_3_1_with_every_route() {
        let doc = serde_json::to_value(document()).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        for path in [
            "/config",
            "/config/validate",
            "/reloads",
            "/routes",
            "/apps/{name}",
            "/plans/{name}",
        ] {
            assert!(doc["paths"].get(path).is_some(), "{path} missing");
        }
        assert!(doc["paths"]["/routes/{name}"]["patch"]["responses"]
            .get("412")
            .is_some());
        assert!(doc["components"]["schemas"].get("Entry").is_some());
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
    }
}
