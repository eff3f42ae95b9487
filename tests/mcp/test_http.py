"""The Python MCP SDK against `causeway mcp --http` (streamable HTTP at /mcp), with the 2025 handshake
and with 2026-07-28, plus the hardening: Host and Origin allow-lists (403), bearer token (401), body
cap (413), a non-loopback bind refused without a token, and a cancelled slow query interrupted."""

import json
import subprocess
import time
import urllib.error
import urllib.request

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import mcp_checks
from conftest import SLOW_SQL, causeway_bin, cpu_seconds, server_args, start_http, stop

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}


def post(url, body, headers=None):
    """POST JSON to the server; returns (status, text)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    req = urllib.request.Request(url, data=data, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(4096).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_everything_over_http(http_server, db_paths, facts, mode, version):
    async def run():
        async with Client(http_server.url, mode=mode) as client:
            assert client.protocol_version == version
            await mcp_checks.check_everything(client, facts, db_paths)

    anyio.run(run)


def test_host_and_origin_allow_lists(http_server):
    port = http_server.port
    assert post(http_server.url, INIT)[0] == 200
    assert post(http_server.url, INIT, {"Host": "evil.example"})[0] == 403
    assert post(http_server.url, INIT, {"Host": f"evil.example:{port}"})[0] == 403
    assert post(http_server.url, INIT, {"Origin": "http://evil.example"})[0] == 403
    assert post(http_server.url, INIT, {"Origin": f"http://localhost:{port + 1}"})[0] == 403
    assert post(http_server.url, INIT, {"Origin": f"http://localhost:{port}"})[0] == 200
    assert post(http_server.url.replace("/mcp", "/other"), INIT)[0] == 404


def test_request_body_cap(http_server):
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' + b"x" * (2 << 20) + b'"}}'
    status, _ = post(http_server.url, big)
    assert status == 413
    assert post(http_server.url, INIT)[0] == 200, "the server keeps serving"


def test_bearer_token_is_required_when_set(db_paths):
    token = "a-long-random-test-token-0123456789"
    s = start_http(db_paths[:1], env={"CAUSEWAY_MCP_TOKEN": token})
    try:
        assert post(s.url, INIT)[0] == 401
        assert post(s.url, INIT, {"Authorization": "Bearer wrong-token-wrong-token-000000"})[0] == 401
        assert post(s.url, INIT, {"Authorization": f"Bearer {token}"})[0] == 200

        async def run():
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(s.url, http_client=http)) as client:
                r = await client.call_tool("run_sql", {"sql": "SELECT 5 AS five"})
                assert r.structured_content["rows"] == [[5]]

        anyio.run(run)
    finally:
        stop(s)


def test_non_loopback_bind_without_token_is_refused(db_paths):
    r = subprocess.run([causeway_bin(), *server_args(db_paths[:1]), "--http", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=20, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode != 0
    assert "CAUSEWAY_MCP_TOKEN" in r.stderr


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_cancelling_a_slow_query_over_http_interrupts_it(db_paths, mode):
    s = start_http(db_paths[:1])
    try:
        async def run():
            async with Client(s.url, mode=mode) as client:
                cpu0 = cpu_seconds(s.proc.pid)
                with pytest.raises(Exception):
                    await client.call_tool("run_sql", {"sql": SLOW_SQL}, read_timeout_seconds=2.0)
                assert cpu_seconds(s.proc.pid) - cpu0 > 0.2, "the slow query did not run"
                await anyio.sleep(0.3)
                c1 = cpu_seconds(s.proc.pid)
                await anyio.sleep(1.5)
                idle = cpu_seconds(s.proc.pid) - c1
                assert idle < 0.3, f"the query kept running after the cancel: {idle:.2f} s of CPU in 1.5 s"
                r = await client.call_tool("run_sql", {"sql": "SELECT 1 AS one"})
                assert r.structured_content["rows"] == [[1]]

        anyio.run(run)
        log = open(s.stderr_path).read()
        assert "cancelled" in log, log[-2000:]
    finally:
        stop(s)


def test_a_request_past_the_time_limit_is_stopped(db_paths):
    s = start_http(db_paths[:1], extra_args=["--timeout", "2s"])
    try:
        async def run():
            async with Client(s.url, mode="auto") as client:
                t0 = time.monotonic()
                r = await client.call_tool("run_sql", {"sql": SLOW_SQL})
                assert r.is_error and "limit" in r.content[0].text
                assert time.monotonic() - t0 < 6
                await anyio.sleep(0.3)
                c1 = cpu_seconds(s.proc.pid)
                await anyio.sleep(1.0)
                assert cpu_seconds(s.proc.pid) - c1 < 0.3, "the query kept running past the time limit"

        anyio.run(run)
    finally:
        stop(s)
