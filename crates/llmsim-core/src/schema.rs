//! Helpers for the JSON Schema of the scenario and sweep files (`llmsim schema`).
//!
//! schemars does not see serde's `alias` attributes, while serde accepts them: these transforms
//! add the aliases to a derived schema, so an editor validating against it accepts every key
//! llmsim accepts. Each type with aliases calls one of them from `#[schemars(transform = ...)]`.

use schemars::Schema;
use serde_json::{Value, json};

/// Adds each `(alias, canonical)` pair of struct properties: the alias gets the canonical
/// property's schema, described as an alias.
pub fn add_property_aliases(schema: &mut Schema, pairs: &[(&str, &str)]) {
    let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (alias, canonical) in pairs {
        if let Some(mut s) = props.get(*canonical).cloned() {
            if let Some(obj) = s.as_object_mut() {
                obj.insert("description".into(), json!(format!("Alias of `{canonical}`.")));
                obj.remove("default");
            }
            props.insert((*alias).to_string(), s);
        }
    }
}

/// Adds each `(alias, canonical)` pair of unit-variant names of an enum whose schema lists its
/// variants as `oneOf` / `anyOf` entries with a `const` or an `enum`, or as a top-level `enum`.
pub fn add_variant_aliases(schema: &mut Schema, pairs: &[(&str, &str)]) {
    if let Some(names) = schema.get_mut("enum").and_then(Value::as_array_mut) {
        for (alias, canonical) in pairs {
            if names.iter().any(|n| n == canonical) {
                names.push(json!(alias));
            }
        }
        return;
    }
    for key in ["oneOf", "anyOf"] {
        let Some(entries) = schema.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for (alias, canonical) in pairs {
            let hit = entries.iter().any(|e| {
                e.get("const").is_some_and(|c| c == canonical)
                    || e.get("enum")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|n| n == canonical))
            });
            if hit {
                entries.push(json!({
                    "type": "string",
                    "const": alias,
                    "description": format!("Alias of `{canonical}`."),
                }));
            }
        }
    }
}

/// For an internally tagged enum (`#[serde(tag = "...")]`): lets the tag property of the
/// variant named `canonical` also take `alias`.
pub fn add_tag_aliases(schema: &mut Schema, tag: &str, pairs: &[(&str, &str)]) {
    for key in ["oneOf", "anyOf"] {
        let Some(entries) = schema.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for entry in entries.iter_mut() {
            let Some(t) = entry.pointer_mut(&format!("/properties/{tag}")) else {
                continue;
            };
            let Some(name) = t.get("const").and_then(Value::as_str).map(str::to_string) else {
                continue;
            };
            let aliases: Vec<&str> = pairs.iter().filter(|(_, c)| *c == name).map(|(a, _)| *a).collect();
            if !aliases.is_empty() {
                let mut names = vec![json!(name)];
                names.extend(aliases.iter().map(|a| json!(a)));
                *t = json!({ "type": "string", "enum": names });
            }
        }
    }
}
