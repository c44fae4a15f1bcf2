//! The OpenAPI 3.1 document of the admin API, served at `/openapi.json`.
//!
//! Built with utoipa from the code: the schemas are derived from the types
//! the handlers answer with (the history's `Entry` and `Issue`, and the
//! bodies below), the config's and each resource's schemas come from the
//! config crate (`sluicegate_config::schema`, built from the decoders' key
//! lists), and the per-resource paths come from the same table of kinds
//! the router is built from, so a resource routed is a resource documented.

use serde::Serialize;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ArrayItems, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, Header, OpenApi as Doc, Ref, RefOr, Required, ResponseBuilder,
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

/// One certificate of a listener (`GET /certificates`).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Certificate {
    /// The listener's address.
    listener: String,
    /// The JSON path of the entry in the config.
    path: String,
    /// The certificate chain's file.
    cert: String,
    /// Its private key's file.
    key: String,
    /// Served to clients that send no name, or one no certificate covers.
    default: bool,
}

/// The listeners' certificates.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Certificates {
    items: Vec<Certificate>,
    total: usize,
}

/// `POST /config/validate` on a valid config.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
struct Valid {
    valid: bool,
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
    components(schemas(
        Error,
        Problems,
        Written,
        Reloads,
        Health,
        Entry,
        Issue,
        Source,
        Certificate,
        Certificates,
        Valid
    ))
)]
struct Base;

/// One operation to document.
struct Op<'a> {
    path: &'a str,
    method: HttpMethod,
    id: String,
    summary: String,
    /// The request body's content types, if it takes one, and its schema
    /// (`None`: a JSON merge patch, any object).
    body: &'a [&'a str],
    body_schema: Option<&'a str>,
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

/// A JSON merge patch (RFC 7396): the fields to change, `null` to remove
/// one. What results must be valid as a whole.
fn merge_patch() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "A JSON merge patch (RFC 7396): the fields to change, null to remove one; the result must be valid.",
            ))
            .build(),
    ))
}

/// The item schema of a resource section, from the config crate.
fn item_schema(section: &str) -> &'static str {
    match section {
        "services" => "Service",
        "routes" => "Route",
        "apps" => "App",
        _ => "PlanItem",
    }
}

/// The name of the schema of a page of `section`.
fn page_name(section: &str) -> &'static str {
    match section {
        "services" => "ServicePage",
        "routes" => "RoutePage",
        "apps" => "AppPage",
        _ => "PlanPage",
    }
}

/// A page of a section's items.
fn page_schema(item: &str) -> RefOr<Schema> {
    let int = |d: &str| {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0.0))
            .description(Some(d))
    };
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(format!("A page of the {item} items.")))
            .property(
                "items",
                utoipa::openapi::schema::ArrayBuilder::new()
                    .items(ArrayItems::RefOrSchema(Box::new(schema_ref(item)))),
            )
            .property("total", int("items in all (after the name filter)"))
            .property("offset", int("items skipped"))
            .property("limit", int("items at most on this page"))
            .required("items")
            .required("total")
            .required("offset")
            .required("limit")
            .build(),
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
            let schema = match op.body_schema {
                Some(name) => schema_ref(name),
                None => merge_patch(),
            };
            rb = rb.content(*ct, ContentBuilder::new().schema(Some(schema)).build());
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
    if op.ok.2.is_some_and(|s| s.ends_with("Page")) {
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
    if let Some(c) = doc.components.as_mut() {
        for (name, schema) in sluicegate_config::schema::components() {
            c.schemas.insert(name.to_string(), schema);
        }
        for section in super::resources::SECTIONS {
            c.schemas.insert(
                page_name(section).to_string(),
                page_schema(item_schema(section)),
            );
        }
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
            body_schema: None,
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
            body_schema: None,
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
            body_schema: None,
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
            body_schema: None,
            ok: ("200", "the config", Some("Config")),
            errors: &[],
            auth: true,
        },
        Op {
            path: "/config",
            method: HttpMethod::Put,
            id: "putConfig".into(),
            summary: "Replace the whole config atomically".into(),
            body: json_yaml,
            body_schema: Some("Config"),
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
            body_schema: Some("Config"),
            ok: ("200", "valid", Some("Valid")),
            errors: &["400", "413"],
            auth: true,
        },
        Op {
            path: "/reloads",
            method: HttpMethod::Get,
            id: "reloads".into(),
            summary: "The reload history, newest first".into(),
            body: &[],
            body_schema: None,
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
            body_schema: None,
            ok: ("200", "the settings", Some("Settings")),
            errors: &[],
            auth: true,
        },
        Op {
            path: "/settings",
            method: HttpMethod::Put,
            id: "putSettings".into(),
            summary: "Replace the settings".into(),
            body: json_only,
            body_schema: Some("Settings"),
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
            body_schema: None,
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
            body_schema: None,
            ok: ("200", "the certificates", Some("Certificates")),
            errors: &[],
            auth: true,
        },
    ];
    for op in fixed {
        add(&mut doc, op);
    }
    for section in super::resources::SECTIONS {
        let item = item_schema(section);
        let page = page_name(section);
        let one = format!("/{section}/{{name}}");
        let all = format!("/{section}");
        let ops = [
            (
                all.as_str(),
                HttpMethod::Get,
                "list",
                "A page of",
                ("200", "a page", Some(page)),
                &["400"][..],
                &[][..],
                None,
            ),
            (
                one.as_str(),
                HttpMethod::Get,
                "get",
                "One of",
                ("200", "the item", Some(item)),
                &["404"][..],
                &[][..],
                None,
            ),
            (
                one.as_str(),
                HttpMethod::Put,
                "put",
                "Create or replace one of",
                ("200", "replaced", Some("Written")),
                WRITE,
                json_only,
                Some(item),
            ),
            (
                one.as_str(),
                HttpMethod::Patch,
                "patch",
                "Merge-patch one of",
                ("200", "applied", Some("Written")),
                WRITE_ONE,
                json_only,
                None,
            ),
            (
                one.as_str(),
                HttpMethod::Delete,
                "delete",
                "Delete one of",
                ("200", "deleted", Some("Written")),
                WRITE_ONE,
                &[][..],
                None,
            ),
        ];
        for (path, method, verb, what, ok, errors, body, body_schema) in ops {
            add(
                &mut doc,
                Op {
                    path,
                    method,
                    id: format!("{verb}{}{}", section[..1].to_uppercase(), &section[1..]),
                    summary: format!("{what} the {section}"),
                    body,
                    body_schema,
                    ok,
                    errors,
                    auth: true,
                },
            );
        }
    }
    crate::live::openapi::add(&mut doc);
    super::rollout_openapi::add(&mut doc);
    super::cache::add(&mut doc);
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
            "/routes/{name}/rollout",
            "/cache",
            "/cache/purge",
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
