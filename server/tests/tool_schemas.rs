//! The checked-in `tool-schemas/` must equal the schemas the code generates. To regenerate:
//! `CAUSEWAY_WRITE_SCHEMAS=1 cargo test --release --workspace --test tool_schemas` (`--workspace`: the
//! features the install builds; `-p` alone builds another DuckDB and leaves out the fleet tools), or
//! `causeway mcp --write-schemas tool-schemas`.

#[test]
fn checked_in_tool_schemas_match_the_code() {
    let dir = causeway_testdata::repo_root().join("tool-schemas");
    if std::env::var_os("CAUSEWAY_WRITE_SCHEMAS").is_some() {
        causeway_server::schemas::write(&dir).unwrap();
    }
    let diff = causeway_server::schemas::differences(&dir);
    assert!(
        diff.is_empty(),
        "tool-schemas/ differs from the code in {diff:?}: regenerate with CAUSEWAY_WRITE_SCHEMAS=1 cargo test --release --workspace --test tool_schemas"
    );
    let files = causeway_server::schemas::generate();
    // 15 tools (capture_trace, open_gpu_window, get_gpu_idle and get_footprint included), and the
    // 8 fleet tools when the `fleet` feature is built
    let tools = if cfg!(feature = "fleet") { 23 } else { 15 };
    assert_eq!(files.len(), 2 * tools, "an input and an output schema for each of the {tools} tools");
    assert!(files.contains_key("capture_trace.input.json") && files.contains_key("capture_trace.output.json"));
    assert!(files.contains_key("open_gpu_window.input.json") && files.contains_key("open_gpu_window.output.json"));
}
