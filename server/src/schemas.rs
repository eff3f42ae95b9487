//! `tool-schemas/`: the JSON Schema of every tool's input and output, generated from the schemars
//! types of [`crate::tools::catalogue`]. `causeway mcp --write-schemas DIR` writes them;
//! `server/tests/tool_schemas.rs` fails when the checked-in files differ from the code. Every tool
//! is written, `capture_trace` included, although a server lists it only with `--allow-capture`,
//! and the fleet tools (feature `fleet`), listed only with `--lake`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::capture::CaptureConfig;
use crate::tools::catalogue_with;

/// File name -> pretty JSON text (newline-terminated) of every schema.
pub fn generate() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let capture = CaptureConfig::new(Vec::new(), None).expect("a capture config without programs or directory");
    #[cfg_attr(not(feature = "fleet"), allow(unused_mut))]
    let mut tools = catalogue_with(Some(Arc::new(capture)));
    #[cfg(feature = "fleet")]
    tools.extend(crate::fleet_tools::catalogue(Arc::new(causeway_fleet::LakeReader::new(
        causeway_fleet::LakeSpec::parse("postgres:host=127.0.0.1").expect("a lake string without a password"),
    ))));
    for spec in tools {
        let t = &spec.tool;
        let pretty = |v: serde_json::Value| serde_json::to_string_pretty(&v).expect("json") + "\n";
        out.insert(format!("{}.input.json", t.name), pretty(serde_json::Value::Object((*t.input_schema).clone())));
        if let Some(o) = &t.output_schema {
            out.insert(format!("{}.output.json", t.name), pretty(serde_json::Value::Object((**o).clone())));
        }
    }
    out
}

/// Write every schema into `dir` and remove stale `*.input.json` / `*.output.json` files.
pub fn write(dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let files = generate();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if (name.ends_with(".input.json") || name.ends_with(".output.json")) && !files.contains_key(&name) {
            std::fs::remove_file(dir.join(&name))?;
        }
    }
    for (name, text) in &files {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(files.len())
}

/// The files of `dir` that differ from the code (missing, changed or stale), by name.
pub fn differences(dir: &Path) -> Vec<String> {
    let files = generate();
    let mut diff: Vec<String> = files
        .iter()
        .filter(|(name, text)| std::fs::read_to_string(dir.join(name)).ok().as_deref() != Some(text.as_str()))
        .map(|(name, _)| name.clone())
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if (name.ends_with(".input.json") || name.ends_with(".output.json")) && !files.contains_key(&name) {
                diff.push(format!("{name} (stale)"));
            }
        }
    }
    diff
}
