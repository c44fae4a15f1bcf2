//! JSON merge patch (RFC 7396): a patch object's members replace the
//! target's, recursively into objects; a `null` member removes one; a
//! patch that is not an object replaces the target whole. And [`Edit`],
//! how a `PUT` or a `PATCH` makes the new value of what it writes, so that
//! both are one write.

use serde_json::Value;

/// What a write does with its body: `PUT` replaces, `PATCH` merges.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edit {
    Replace,
    Merge,
}

impl Edit {
    /// `current` after this edit with `body`: the body itself, or the body
    /// merged into `current`.
    pub(crate) fn apply(self, current: Value, body: Value) -> Value {
        match self {
            Edit::Replace => body,
            Edit::Merge => {
                let mut value = current;
                merge(&mut value, &body);
                value
            }
        }
    }
}

/// Applies `patch` to `target`.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(obj) = target else {
        return;
    };
    for (key, value) in members {
        if value.is_null() {
            obj.remove(key);
        } else {
            merge(obj.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(target: Value, patch: Value) -> Value {
        let mut t = target;
        merge(&mut t, &patch);
        t
    }

    #[test]
    fn replace_takes_the_body_and_merge_patches_the_current_value() {
        let current = json!({ "a": 1, "b": { "c": 2, "d": 3 } });
        let body = json!({ "b": { "c": null, "e": 4 } });
        assert_eq!(
            Edit::Replace.apply(current.clone(), body.clone()),
            json!({ "b": { "c": null, "e": 4 } })
        );
        assert_eq!(
            Edit::Merge.apply(current, body),
            json!({ "a": 1, "b": { "d": 3, "e": 4 } })
        );
    }

    #[test]
    fn members_are_replaced_added_and_removed() {
        let target = json!({ "a": "b", "c": { "d": "e", "f": "g" }, "l": [1, 2] });
        let patch = json!({ "a": "z", "c": { "f": null, "h": 1 }, "l": [3], "n": { "x": null } });
        assert_eq!(
            merged(target, patch),
            json!({ "a": "z", "c": { "d": "e", "h": 1 }, "l": [3], "n": {} })
        );
    }

    #[test]
    fn the_rfc_7396_examples() {
        // A selection of the examples in RFC 7396, appendix A.
        assert_eq!(merged(json!({"a":"b"}), json!({"a":"c"})), json!({"a":"c"}));
        assert_eq!(
            merged(json!({"a":"b"}), json!({"b":"c"})),
            json!({"a":"b","b":"c"})
        );
        assert_eq!(merged(json!({"a":"b"}), json!({"a":null})), json!({}));
        assert_eq!(
            merged(json!({"a":["b"]}), json!({"a":"c"})),
            json!({"a":"c"})
        );
        assert_eq!(
            merged(json!({"a":"c"}), json!({"a":["b"]})),
            json!({"a":["b"]})
        );
        assert_eq!(
            merged(json!(["a", "b"]), json!(["c", "d"])),
            json!(["c", "d"])
        );
        assert_eq!(merged(json!({"a":"b"}), json!(["c"])), json!(["c"]));
        assert_eq!(merged(json!({"a":"foo"}), json!(null)), json!(null));
        assert_eq!(
            merged(json!({"e":null}), json!({"a":1})),
            json!({"e":null,"a":1})
        );
        assert_eq!(
            merged(json!([1, 2]), json!({"a":"b","c":null})),
            json!({"a":"b"})
        );
        assert_eq!(
            merged(json!({}), json!({"a":{"bb":{"ccc":null}}})),
            json!({"a":{"bb":{}}})
        );
    }
}
