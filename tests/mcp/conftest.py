"""Fixtures of the MCP client tests: the causeway binary (CAUSEWAY_BIN, set by cli/tests/mcp_clients.rs),
the shared Ingero DBs and their FACTS.json, and a `causeway mcp --http` server on a free loopback port.
Every test fails (never skips) when something it needs is missing."""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(os.environ.get("CAUSEWAY_CACHE", pathlib.Path.home() / ".cache" / "causeway"))


def causeway_bin() -> str:
    b = os.environ.get("CAUSEWAY_BIN")
    if not b:
        pytest.fail("CAUSEWAY_BIN is not set: run these tests through `cargo test --release -p causeway --test mcp_clients`")
    if not os.access(b, os.X_OK):
        pytest.fail(f"CAUSEWAY_BIN={b} is not an executable")
    return b


def dbs_dir() -> pathlib.Path:
    d = pathlib.Path(os.environ.get("CAUSEWAY_INGERO_DBS", REPO / "testdata" / "ingero-dbs"))
    if not (d / "FACTS.json").exists():
        pytest.fail(f"FACTS.json not found in {d} (set CAUSEWAY_INGERO_DBS)")
    return d


@pytest.fixture(scope="session")
def facts():
    return json.loads((dbs_dir() / "FACTS.json").read_text())


@pytest.fixture(scope="session")
def db_paths(facts):
    """Every shared DB, sorted by name (the server's trace indexes follow this order)."""
    return [str(dbs_dir() / name) for name in sorted(facts["dbs"])]


def server_args(paths):
    args = ["mcp"]
    for p in paths:
        args += ["--db", p]
    return args


class HttpServer:
    def __init__(self, proc, url, stderr_path):
        self.proc, self.url, self.stderr_path = proc, url, stderr_path

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1].split("/")[0])


def start_http(paths, extra_args=(), env=None, timeout=20.0):
    """Start `causeway mcp --http 127.0.0.1:0` and wait for the URL it prints on stderr."""
    log = open(f"/tmp/causeway-mcp-http-{os.getpid()}-{time.monotonic_ns()}.log", "w+")
    e = dict(os.environ, CAUSEWAY_LOG="info", NO_COLOR="1")
    e.update(env or {})
    proc = subprocess.Popen([causeway_bin(), *server_args(paths), "--http", "127.0.0.1:0", *extra_args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=e)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log.seek(0)
        m = re.search(r"listening on (http://\S+/mcp)", log.read())
        if m:
            return HttpServer(proc, m.group(1), log.name)
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"causeway mcp --http exited with {proc.returncode}: {log.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("causeway mcp --http did not print its URL in time")


def stop(server):
    server.proc.terminate()
    try:
        server.proc.wait(5)
    except subprocess.TimeoutExpired:
        server.proc.kill()


@pytest.fixture(scope="session")
def http_server(db_paths):
    s = start_http(db_paths)
    yield s
    stop(s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(name: str):
    """Pids of this process's children whose command is `name`."""
    me = os.getpid()
    out = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1: stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and comm == name:
            out.append(int(p.name))
    return out


SLOW_SQL = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 1000000000) SELECT COUNT(*) AS n FROM c"
