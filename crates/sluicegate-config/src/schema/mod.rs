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
/// A path or a path template: `?`, `#`, spaces and controls only inside a
/// `{name:regex(...)}`.
const PATH_TEMPLATE: &str = r"^/(?:[^?#\s\u0000-\u001F\u007F{]|\{[A-Za-z_][A-Za-z0-9_]*(?::(?:int|uint|uuid|hex|alpha|alnum|\*))?\}|\{[A-Za-z_][A-Za-z0-9_]*:regex\(.*?\)\})*$";
/// An address block, `ADDR/LEN` or one address.
const BLOCK: &str = r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$";
/// A rate: `N/s`, `N/min`, `N/h`, `N/day` (and their longer spellings).
const RATE: &str = r"^\s*[0-9]+\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$";
/// A quota: `N/minute`, `N/hour`, `N/day`, `N/month`.
const QUOTA: &str = r"^\s*[0-9]+\s*/\s*(min|minute|h|hour|d|day|month)\s*$";

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

// ---- the parts (resources, top-level keys) and the named schemas ----

mod named;
mod resources;
mod top;

pub use named::components;

/// The resource sections: each has its own schema and API path.
pub const SECTIONS: [&str; 4] = ["services", "routes", "apps", "plans"];

#[cfg(test)]
mod tests;
