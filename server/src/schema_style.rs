//! Tool schemas in the most portable JSON Schema style (the MCP Inspector's `--strict` check):
//! a single `type` per schema (`["string", "null"]` becomes an `anyOf`), no `null` branch on
//! optional inputs (absent means "not given"; `null` is still accepted at run time), and no
//! non-standard `format`s such as schemars' `uint64` (the `minimum`/`maximum` say the range).

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

/// Restyle an output schema (nullable fields keep `null`, as an `anyOf` branch).
pub fn output(schema: Map<String, Value>) -> Map<String, Value> {
    let mut v = Value::Object(schema);
    restyle(&mut v, false);
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a schema object stays an object"),
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
}
