//! Runs the MCP client tests of `tests/mcp` (the Python MCP SDK over stdio and HTTP, the MCP Inspector
//! CLI, the official conformance suite) against this build's `causeway` binary. Their dependencies
//! come from `scripts/install-test-deps.sh`; when they are missing this test fails, it never skips.

use std::path::PathBuf;
use std::process::Command;

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("CAUSEWAY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/causeway/venv"));
    let python = venv.join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/install-test-deps.sh", python.display());
    python
}

#[test]
fn mcp_clients_pass() {
    let repo = causeway_testdata::repo_root();
    let status = Command::new(venv_python())
        .args(["-m", "pytest", "tests/mcp", "-q", "-p", "no:cacheprovider"])
        .current_dir(&repo)
        .env("CAUSEWAY_BIN", env!("CARGO_BIN_EXE_causeway"))
        .status()
        .expect("run pytest");
    assert!(status.success(), "the MCP client tests failed (pytest exit {:?}); rerun: CAUSEWAY_BIN=<causeway> ~/.cache/causeway/venv/bin/python -m pytest tests/mcp", status.code());
}
