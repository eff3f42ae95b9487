//! Tool schemas in the most portable JSON Schema style (the MCP Inspector's `--strict` check):
//! a single `type` per schema (`["string", "null"]` becomes an `anyOf`), no `null` branch on
//! optional inputs (absent means "not given"; `null` is still accepted at run time), and no
//! non-standard `format`s such as schemars' `uint64` (the `minimum`/`maximum` say the range).
//!
//! Output schemas are also kept small for `tools/list` (issue 47: 114,008 characters before):
//! they describe an answer two levels deep. The answer's own fields keep their descriptions; the
//! types they refer to (`$defs`) keep their fields, typed, without descriptions; a type referred
//! to only from inside those is named by its JSON type alone (`{"type": "object"}`, or `{}` for
//! an enum of variants), which every answer still validates against.

use serde_json::{Map, Value};

/// Formats defined by JSON Schema 2020-12 (others are dropped).
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords that constrain only the non-null branch when a type array is split.
const VALUE_KEYWORDS: [&str; 6] = ["format", "minimum", "maximum", "items", "properties", "enum"];

fn is_null_schema(v: &Value) -> bool {
    v.get("type") == Some(&Value::from("null")) && v.as_object().is_some_and(|o| o.len() == 1)
}

/// Rewrite one schema object and everything under it.
fn restyle(v: &mut Value, optional_input: bool) {
    match v {
        Value::Object(map) => {
            if map.get("format").and_then(Value::as_str).is_some_and(|f| !STANDARD_FORMATS.contains(&f)) {
                map.remove("format");
            }
            if optional_input {
                drop_null(map);
            }
            split_type_array(map);
            let required: Vec<String> = map
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(|x| x.as_str().map(String::from)).collect())
                .unwrap_or_default();
            for (k, child) in map.iter_mut() {
                match k.as_str() {
                    "properties" => {
                        if let Value::Object(props) = child {
                            for (name, p) in props.iter_mut() {
                                restyle(p, optional_input && !required.contains(name));
                            }
                        }
                    }
                    "$defs" => {
                        if let Value::Object(defs) = child {
                            defs.values_mut().for_each(|d| restyle(d, optional_input));
                        }
                    }
                    _ => restyle(child, false),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| restyle(i, false)),
        _ => {}
    }
}

/// An optional input needs no `null`: drop it from a type array or an `anyOf`.
fn drop_null(map: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let t = types.remove(0);
            map.insert("type".into(), t);
        }
    }
    if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
        branches.retain(|b| !is_null_schema(b));
        if branches.len() == 1 {
            let only = branches.remove(0);
            map.remove("anyOf");
            if let Value::Object(o) = only {
                for (k, v) in o {
                    map.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// `{"type": ["integer", "null"], "minimum": 0}` -> `{"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}`.
fn split_type_array(map: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = map.get("type") else { return };
    let types = types.clone();
    map.remove("type");
    let mut value_keys = Map::new();
    for k in VALUE_KEYWORDS {
        if let Some(v) = map.remove(k) {
            value_keys.insert(k.into(), v);
        }
    }
    let branches: Vec<Value> = types
        .into_iter()
        .map(|t| {
            let mut b = Map::new();
            if t != "null" {
                b.extend(value_keys.clone());
            }
            b.insert("type".into(), t);
            Value::Object(b)
        })
        .collect();
    map.insert("anyOf".into(), Value::Array(branches));
}

/// Restyle an input schema (optional properties lose their `null`).
pub fn input(mut schema: Map<String, Value>) -> Map<String, Value> {
    let mut v = Value::Object(std::mem::take(&mut schema));
    restyle(&mut v, true);
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a schema object stays an object"),
    }
}

/// Restyle an output schema (nullable fields keep `null`, as an `anyOf` branch) and cut it to
/// two levels (see the module's doc).
pub fn output(schema: Map<String, Value>) -> Map<String, Value> {
    let mut v = Value::Object(schema);
    restyle(&mut v, false);
    let Value::Object(mut m) = v else { unreachable!("a schema object stays an object") };
    let defs = match m.remove("$defs") {
        Some(Value::Object(d)) => d,
        _ => Map::new(),
    };
    m.remove("description");
    m.remove("title");
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            let description = p.get("description").cloned();
            strip_text(p);
            if let (Some(d), Value::Object(o)) = (description, p) {
                o.insert("description".into(), d);
            }
        }
    }
    let mut named = Vec::new();
    refs(&Value::Object(m.clone()), &mut named);
    let mut kept = Map::new();
    for name in named {
        if let Some(def) = defs.get(&name) {
            let mut def = def.clone();
            strip_text(&mut def);
            by_type_alone(&mut def, &defs);
            kept.insert(name, def);
        }
    }
    if !kept.is_empty() {
        m.insert("$defs".into(), Value::Object(kept));
    }
    m
}

/// Drop `description` and `title` texts everywhere under `v`.
fn strip_text(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, x| !(matches!(k.as_str(), "description" | "title") && x.is_string()));
            map.values_mut().for_each(strip_text);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_text),
        _ => {}
    }
}

/// The `$defs` names `v` refers to, in order, each once.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                match (k.as_str(), x.as_str()) {
                    ("$ref", Some(r)) => {
                        let name = r.rsplit('/').next().unwrap_or(r).to_string();
                        if !out.contains(&name) {
                            out.push(name);
                        }
                    }
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// Replace every `$ref` under `v` by the JSON type of what it names (`{}` when that has none).
fn by_type_alone(v: &mut Value, defs: &Map<String, Value>) {
    match v {
        Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                let name = r.rsplit('/').next().unwrap_or(r);
                let mut only = Map::new();
                if let Some(t) = defs.get(name).and_then(|d| d.get("type")).filter(|t| t.is_string()) {
                    only.insert("type".into(), t.clone());
                }
                *map = only;
                return;
            }
            map.values_mut().for_each(|x| by_type_alone(x, defs));
        }
        Value::Array(items) => items.iter_mut().for_each(|x| by_type_alone(x, defs)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn optional_inputs_lose_null_and_outputs_split_type_arrays() {
        let s = json!({"type": "object", "required": ["sql"], "properties": {
            "sql": {"type": "string"},
            "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
            "trace": {"anyOf": [{"$ref": "#/$defs/T"}, {"type": "null"}], "description": "d"}}});
        let i = Value::Object(input(s.as_object().unwrap().clone()));
        assert_eq!(i["properties"]["limit"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(i["properties"]["trace"], json!({"$ref": "#/$defs/T", "description": "d"}));
        let o = Value::Object(output(s.as_object().unwrap().clone()));
        assert_eq!(o["properties"]["limit"], json!({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}));
        assert_eq!(o["properties"]["trace"]["anyOf"][1], json!({"type": "null"}));
    }

    #[test]
    fn outputs_are_described_two_levels_deep() {
        let s = json!({"type": "object", "title": "Out", "properties": {
            "a": {"$ref": "#/$defs/A", "description": "kept"}},
            "$defs": {
                "A": {"type": "object", "description": "dropped", "properties": {
                    "b": {"$ref": "#/$defs/B"}, "e": {"anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]}}},
                "B": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "E": {"oneOf": [{"const": "p"}, {"const": "q"}]},
                "Unused": {"type": "string"}}});
        let o = Value::Object(output(s.as_object().unwrap().clone()));
        assert_eq!(
            o,
            json!({"type": "object", "properties": {
            "a": {"$ref": "#/$defs/A", "description": "kept"}},
            "$defs": {"A": {"type": "object", "properties": {
                "b": {"type": "object"}, "e": {"anyOf": [{}, {"type": "null"}]}}}}})
        );
    }
}
