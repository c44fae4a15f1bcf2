//! `match.path` templates: a path with `{name}` and `{name:TYPE}` segments
//! (and a last `{name:*}` that takes the rest), parsed and checked here
//! into the model's [`PathTemplate`]; the router compiles them into its
//! segment trie.
//!
//! Each parameter is one whole segment: `/users/{id:int}/posts` is valid,
//! `/users/id{id}` is not. A `regex(...)` type ends at the first `)}`
//! followed by `/` or by the end of the template, so its regex may hold
//! `/`, `{`, `}` or `)` elsewhere.

use crate::model::{ParamType, PathTemplate, TemplateSegment, MAX_PARAMS};

/// Whether `text` is a template (holds a `{`); other paths stay exact.
pub(crate) fn is_template(text: &str) -> bool {
    text.contains('{')
}

/// A parameter name: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_param_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Parses a template that starts with `/`; a message saying what is wrong.
pub(crate) fn parse(text: &str) -> Result<PathTemplate, String> {
    let mut segments = Vec::new();
    let mut rest = text
        .strip_prefix('/')
        .ok_or("must start with \"/\"".to_string())?;
    loop {
        let seg_end;
        if let Some(inner) = rest.strip_prefix('{') {
            let (param, after) = param(inner)?;
            if !(after.is_empty() || after.starts_with('/')) {
                return Err(format!(
                    "a parameter must be a whole segment, found {:?} after it (write /a/{{b}}, not /a{{b}})",
                    after.split('/').next().unwrap_or_default()
                ));
            }
            if let Some(TemplateSegment::Rest { name }) = segments.last() {
                return Err(format!("{{{name}:*}} must be the last segment"));
            }
            segments.push(param);
            seg_end = text.len() - after.len();
        } else {
            let end = rest.find('/').unwrap_or(rest.len());
            let lit = &rest[..end];
            if lit.contains(['{', '}']) {
                return Err(format!(
                    "a parameter must be a whole segment, found {lit:?} (write /a/{{b}}, not /a{{b}})"
                ));
            }
            if let Some(TemplateSegment::Rest { name }) = segments.last() {
                return Err(format!("{{{name}:*}} must be the last segment"));
            }
            let last = end == rest.len();
            if lit.is_empty() && !last {
                return Err("empty segment (\"//\")".into());
            }
            if lit == "." || lit == ".." {
                return Err(format!("a {lit:?} segment never matches a normalised path"));
            }
            if lit.contains(['?', '#']) {
                return Err("must not contain '?' or '#' (only the path is matched)".into());
            }
            if lit.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err("must not contain spaces or control characters".into());
            }
            segments.push(TemplateSegment::Literal(lit.to_string()));
            seg_end = text.len() - rest.len() + end;
        }
        match text[seg_end..].strip_prefix('/') {
            Some(next) => rest = next,
            None => break,
        }
    }
    let t = PathTemplate {
        text: text.to_string(),
        segments,
    };
    let names: Vec<&str> = t.params().collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(format!("duplicate parameter name {n:?}"));
        }
    }
    if names.len() > MAX_PARAMS {
        return Err(format!(
            "{} parameters, at most {MAX_PARAMS} are allowed",
            names.len()
        ));
    }
    Ok(t)
}

/// One parameter after its `{`: it, and the text after its `}`.
fn param(inner: &str) -> Result<(TemplateSegment, &str), String> {
    let name_end = inner
        .find([':', '}'])
        .ok_or("a parameter misses its closing \"}\"")?;
    let name = &inner[..name_end];
    if name.is_empty() {
        return Err("a parameter needs a name, e.g. {id}".into());
    }
    if !is_param_name(name) {
        return Err(format!(
            "bad parameter name {name:?}: letters, digits and _, not starting with a digit"
        ));
    }
    let name_s = name.to_string();
    let after_name = &inner[name_end..];
    if let Some(after) = after_name.strip_prefix('}') {
        return Ok((
            TemplateSegment::Param {
                name: name_s,
                ty: ParamType::Any,
            },
            after,
        ));
    }
    let spec = &after_name[1..];
    if let Some(body) = spec.strip_prefix("regex(") {
        // Ends at the first ")}" that ends a segment.
        let end = body
            .match_indices(")}")
            .map(|(i, _)| i)
            .find(|&i| matches!(body.as_bytes().get(i + 2), None | Some(b'/')))
            .ok_or_else(|| format!("{{{name}:regex(...)}} misses its closing \")}}\""))?;
        let re = &body[..end];
        if let Err(e) = regex::Regex::new(re) {
            return Err(format!(
                "invalid regex {re:?} for {{{name}}}: {}",
                super::value_regex::regex_error(&e)
            ));
        }
        if let Err(e) = crate::ValueRegex::new(re) {
            return Err(format!(
                "regex {re:?} for {{{name}}} cannot be compiled for matching: {e}"
            ));
        }
        let seg = TemplateSegment::Param {
            name: name_s,
            ty: ParamType::Regex(re.to_string()),
        };
        return Ok((seg, &body[end + 2..]));
    }
    let close = spec
        .find('}')
        .ok_or("a parameter misses its closing \"}\"")?;
    let ty = match &spec[..close] {
        "*" => {
            return Ok((TemplateSegment::Rest { name: name_s }, &spec[close + 1..]));
        }
        "int" => ParamType::Int,
        "uint" => ParamType::Uint,
        "uuid" => ParamType::Uuid,
        "hex" => ParamType::Hex,
        "alpha" => ParamType::Alpha,
        "alnum" => ParamType::Alnum,
        other => {
            return Err(format!(
                "unknown parameter type {other:?} for {{{name}}} (expected int, uint, uuid, hex, alpha, alnum, regex(...) or *)"
            ))
        }
    };
    Ok((
        TemplateSegment::Param { name: name_s, ty },
        &spec[close + 1..],
    ))
}

/// The `${name}` references in `text`, as (byte range of the whole
/// reference, name). `$$` is a literal `$` and starts no reference.
pub fn references(text: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            if b.get(i + 1) == Some(&b'$') {
                i += 2;
                continue;
            }
            if b.get(i + 1) == Some(&b'{') {
                if let Some(close) = text[i + 2..].find('}') {
                    let end = i + 2 + close;
                    out.push((i..end + 1, &text[i + 2..end]));
                    i = end + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, ty: ParamType) -> TemplateSegment {
        TemplateSegment::Param {
            name: name.into(),
            ty,
        }
    }

    #[test]
    fn parses() {
        let t = parse("/users/{id:int}/files/{rest:*}").unwrap();
        assert_eq!(
            t.segments,
            [
                TemplateSegment::Literal("users".into()),
                p("id", ParamType::Int),
                TemplateSegment::Literal("files".into()),
                TemplateSegment::Rest {
                    name: "rest".into()
                },
            ]
        );
        assert_eq!(t.params().collect::<Vec<_>>(), ["id", "rest"]);
        assert_eq!(t.param_index("rest"), Some(1));
        let t = parse("/{a}/{b:uuid}/{c:regex(v[0-9]{1,3}/?)}/x/").unwrap();
        assert_eq!(
            t.segments,
            [
                p("a", ParamType::Any),
                p("b", ParamType::Uuid),
                p("c", ParamType::Regex("v[0-9]{1,3}/?".into())),
                TemplateSegment::Literal("x".into()),
                TemplateSegment::Literal("".into()),
            ]
        );
        for ty in ["uint", "hex", "alpha", "alnum"] {
            assert!(parse(&format!("/{{x:{ty}}}")).is_ok(), "{ty}");
        }
        assert!(parse(
            "/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}/{j}/{k}/{l}/{m}/{n}/{o}/{p}/{q}/{r}/{s}/{t}"
        )
        .is_ok());
    }

    #[test]
    fn refused() {
        let cases = [
            ("/a/{id:float}", "unknown parameter type \"float\""),
            ("/a/{id:regex(()}", "invalid regex"),
            ("/a/{id:regex(a+}", "misses its closing"),
            ("/{id}/{id:int}", "duplicate parameter name \"id\""),
            ("/{rest:*}/x", "must be the last segment"),
            ("/{rest:*}/{x}", "must be the last segment"),
            ("/a{b}", "whole segment"),
            ("/{b}c", "whole segment"),
            ("/a/}", "whole segment"),
            ("/{}", "needs a name"),
            ("/{:int}", "needs a name"),
            ("/{1a}", "bad parameter name"),
            ("/{a-b}", "bad parameter name"),
            ("/{a", "closing"),
            ("/{a:int", "closing"),
            ("/a//{b}", "empty segment"),
            ("/../{b}", "never matches"),
            ("/a?/{b}", "'?'"),
            ("/a b/{b}", "spaces"),
            ("/{w:regex(\\bw\\b)}", "cannot be compiled"),
        ];
        for (t, want) in cases {
            let e = parse(t).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
        let many: String = (0..=MAX_PARAMS).map(|i| format!("/{{p{i}}}")).collect();
        assert!(parse(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn finds_references() {
        let r = references("/v2/${id}/$${x}/${ a }/$1/${");
        let names: Vec<&str> = r.iter().map(|(_, n)| *n).collect();
        assert_eq!(names, ["id", " a "]);
        assert_eq!(&"/v2/${id}"[r[0].0.clone()], "${id}");
    }
}
