"""An MCP server that keeps up with a live host (issue 47 item 3), driven by real clients:

- resource subscriptions: a client subscribed to a trace that is being written gets
  `notifications/resources/updated` when a chain appears (the Python SDK over stdio and HTTP);
- logging: `logging/setLevel` decides which of the server's log messages reach the client;
- `capture_trace` as an MCP task (SEP-2663, which the Python SDK does not speak yet: a plain JSON-RPC
  client over stdio): progress in `tasks/get`, `tasks/cancel`, the result later;
- the user confirms a capture by elicitation (declined: nothing recorded; accepted: recorded).

Every wait is on an event with a generous limit: a slow 2-core VM passes, just later."""

import json
import os
import queue
import shutil
import sqlite3
import subprocess
import threading
import time

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from conftest import causeway_bin, server_args, start_http, stop

# logging/setLevel and resources/subscribe are the 2025 protocols' (the SDK warns that 2026-07-28 drops them)
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

WAIT = 120.0
"""The most any event is waited for (it comes in seconds on an idle host)."""


class Inbox:
    """What a client received, with a wait for the first item that matches."""

    def __init__(self):
        self.items = []
        self._changed = anyio.Event()

    async def put(self, item):
        self.items.append(item)
        ev, self._changed = self._changed, anyio.Event()
        ev.set()

    async def wait_for(self, pred, what, timeout=WAIT, start=0):
        try:
            with anyio.fail_after(timeout):
                while True:
                    for x in self.items[start:]:
                        if pred(x):
                            return x
                    await self._changed.wait()
        except TimeoutError:
            pytest.fail(f"no {what} within {timeout} s; got {self.items[start:]!r}"[:3000])


def client_for(transport, paths, extra=(), **kw):
    """A legacy-handshake (2025-11-25) Python SDK client of `causeway mcp` over stdio or HTTP, and
    the HTTP server to stop afterwards (None over stdio)."""
    if transport == "stdio":
        params = StdioServerParameters(command=causeway_bin(), args=[*server_args(paths), *extra],
                                       env={"CAUSEWAY_LOG": "warn", "NO_COLOR": "1"})
        return Client(params, mode="legacy", **kw), None
    s = start_http(paths, extra)
    return Client(s.url, mode="legacy", **kw), s


def live_copy(src, tmp_path):
    """A copy of `src` with every event removed (a trace just started: no chain) and a function that
    writes them back in one transaction (the tracer's next commits)."""
    live = tmp_path / "live.db"
    shutil.copy(src, live)
    con = sqlite3.connect(live)
    con.execute("DELETE FROM events")
    con.commit()
    con.close()

    def write_events():
        con = sqlite3.connect(live)
        # immutable: the shared trace is in WAL mode, and a read-only open would still leave -wal and
        # -shm files beside it (the convert test checks that the originals stay untouched)
        con.execute("ATTACH DATABASE ? AS src", (f"file:{src}?immutable=1",))
        con.execute("INSERT INTO events SELECT * FROM src.events")
        con.commit()
        con.close()

    return live, write_events


def chains_of(result):
    return json.loads(result.contents[0].text)["chains"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_subscribed_trace_tells_when_a_chain_appears(db_paths, tmp_path, transport):
    src = next(p for p in db_paths if p.endswith("pytorch-dataloader-starvation.db"))
    live, write_events = live_copy(src, tmp_path)
    uri = "causeway://traces/live/chains"
    inbox = Inbox()

    async def on_message(m):
        if isinstance(m, types.ResourceUpdatedNotification):
            await inbox.put(m.params.uri)

    async def run():
        client, server = client_for(transport, [str(live)], message_handler=on_message)
        try:
            async with client:
                caps = client.server_capabilities
                assert caps.resources.subscribe is True and caps.logging is not None, caps
                assert chains_of(await client.read_resource(uri)) == [], "no events yet: no chain"
                await client.subscribe_resource(uri)
                await client.subscribe_resource("causeway://traces/live/session")
                await anyio.to_thread.run_sync(write_events)
                await inbox.wait_for(lambda u: u == uri, f"notifications/resources/updated for {uri}")
                chains = chains_of(await client.read_resource(uri))
                assert chains and chains[0]["id"] == "c1", chains
                await inbox.wait_for(lambda u: u.endswith("/live/session"), "the update of the other subscribed resource")
                await client.unsubscribe_resource(uri)
                await client.unsubscribe_resource("causeway://traces/live/session")
                # still serving after the watchers stopped
                assert chains_of(await client.read_resource(uri)) == chains
        finally:
            if server:
                stop(server)

    anyio.run(run)


def test_a_2026_client_listens_for_a_chain(db_paths, tmp_path):
    """2026-07-28 has no resources/subscribe: the same watcher answers a `subscriptions/listen`."""
    src = next(p for p in db_paths if p.endswith("pytorch-dataloader-starvation.db"))
    live, write_events = live_copy(src, tmp_path)
    uri = "causeway://traces/live/chains"

    async def run():
        params = StdioServerParameters(command=causeway_bin(), args=server_args([str(live)]),
                                       env={"CAUSEWAY_LOG": "warn", "NO_COLOR": "1"})
        async with Client(params, mode="auto") as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                assert uri in (sub.honored.resource_subscriptions or []), sub.honored
                await anyio.to_thread.run_sync(write_events)
                with anyio.fail_after(WAIT):
                    async for event in sub:
                        if isinstance(event, ResourceUpdated) and event.uri == uri:
                            break
            assert chains_of(await client.read_resource(uri))

    anyio.run(run)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_log_messages_follow_the_level_the_client_set(db_paths, transport):
    logs = Inbox()

    async def on_log(params):
        await logs.put(params)

    def said(level, text):
        return lambda p: p.level == level and text in str(p.data)

    async def run():
        client, server = client_for(transport, db_paths[:1], logging_callback=on_log)
        try:
            async with client:
                await client.set_logging_level("info")
                await client.call_tool("get_trace_stats", {})
                m = await logs.wait_for(said("info", "tool get_trace_stats answered"), "the info message of a tool call")
                assert m.logger.startswith("causeway"), m
                await client.set_logging_level("warning")
                seen = len(logs.items)
                await client.call_tool("get_trace_stats", {})  # its info message is not sent
                r = await client.call_tool("run_sql", {"sql": "SELECT * FROM no_such_table"})
                assert r.is_error
                await logs.wait_for(said("warning", "tool run_sql answered with an error"), "the warning of a failed tool call",
                                    start=seen)
                # messages keep their order: had the info message been sent, it would be here already
                later = logs.items[seen:]
                assert not [p for p in later if p.level in ("debug", "info", "notice")], later
        finally:
            if server:
                stop(server)

    anyio.run(run)


class RawStdio:
    """A plain JSON-RPC client over `causeway mcp`'s stdio: newline-delimited messages, one reader
    thread, requests answered by id, notifications kept."""

    def __init__(self, args):
        self.proc = subprocess.Popen([causeway_bin(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=dict(os.environ, CAUSEWAY_LOG="warn", NO_COLOR="1"))
        self.inbox = queue.Queue()
        self.notes = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip():
                self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send(self, msg):
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params=None, timeout=WAIT):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no answer to {method} within {timeout} s")
            m = self.inbox.get(timeout=left)
            if m is None:
                pytest.fail(f"the server exited while answering {method}")
            if m.get("id") == rid and "method" not in m:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.notes.append(m)

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def task_client(tmp_path, extra_caps=None):
    c = RawStdio(["mcp", "--allow-capture", "--capture-dir", str(tmp_path)])
    caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    caps.update(extra_caps or {})
    init = c.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": caps,
                                    "clientInfo": {"name": "raw-tasks", "version": "0"}})
    assert "io.modelcontextprotocol/tasks" in init["capabilities"].get("extensions", {}), init["capabilities"]
    c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return c


def poll_task(c, task_id, until, what, timeout=WAIT):
    """tasks/get every half second until `until(task)`; the task then."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = c.request("tasks/get", {"taskId": task_id})
        if until(last):
            return last
        time.sleep(max(last.get("pollIntervalMs", 500), 100) / 1000)
    pytest.fail(f"task {task_id}: no {what} within {timeout} s; last {last}")


def test_capture_runs_as_a_task_polled_and_cancelled(tmp_path):
    target = subprocess.Popen(["sleep", "600"])
    c = task_client(tmp_path)
    try:
        started = c.request("tools/call", {"name": "capture_trace", "arguments": {"pids": [target.pid], "duration_s": 60}})
        assert started["resultType"] == "task" and started["status"] == "working", started
        tid = started["taskId"]
        # progress: the capture's own report, in the task's status message
        t = poll_task(c, tid, lambda t: " s of 60 s" in (t.get("statusMessage") or ""), "progress report")
        assert t["status"] == "working", t
        assert c.request("tasks/cancel", {"taskId": tid}).get("resultType", "complete") == "complete"
        t = poll_task(c, tid, lambda t: t["status"] in ("cancelled", "completed", "failed"), "end after the cancel")
        assert t["status"] == "cancelled", t

        # a short one runs to its end: the result later, the trace then served
        started = c.request("tools/call", {"name": "capture_trace", "arguments": {"pids": [target.pid], "duration_s": 2}})
        t = poll_task(c, started["taskId"], lambda t: t["status"] not in ("working", "input_required"), "result")
        assert t["status"] == "completed", t
        result = t["result"]
        assert not result.get("isError"), result
        name = result["structuredContent"]["trace"]
        listed = c.request("tools/call", {"name": "list_traces", "arguments": {}})
        assert name in json.dumps(listed["structuredContent"]), listed
        with pytest.raises(RuntimeError):
            c.request("tasks/get", {"taskId": "no-such-task"})
    finally:
        c.close()
        target.kill()
        target.wait()


def test_without_the_tasks_extension_capture_answers_in_the_call(tmp_path):
    target = subprocess.Popen(["sleep", "600"])
    c = RawStdio(["mcp", "--allow-capture", "--capture-dir", str(tmp_path)])
    try:
        c.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "raw", "version": "0"}})
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        r = c.request("tools/call", {"name": "capture_trace", "arguments": {"pids": [target.pid], "duration_s": 1}})
        assert "resultType" not in r or r["resultType"] == "complete", r
        assert not r.get("isError") and r["structuredContent"]["trace"], r
    finally:
        c.close()
        target.kill()
        target.wait()


@pytest.mark.parametrize("answer", ["decline", "accept"])
def test_the_user_confirms_a_capture_by_elicitation(tmp_path, answer):
    target = subprocess.Popen(["sleep", "600"])
    asked = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action="decline")

    async def run():
        params = StdioServerParameters(command=causeway_bin(),
                                       args=["mcp", "--allow-capture", "--capture-dir", str(tmp_path)],
                                       env={"CAUSEWAY_LOG": "warn", "NO_COLOR": "1"})
        async with Client(params, mode="legacy", elicitation_callback=on_elicit) as client:
            r = await client.call_tool("capture_trace", {"pids": [target.pid], "duration_s": 1},
                                       read_timeout_seconds=WAIT)
            assert len(asked) == 1 and f"[{target.pid}]" in asked[0] and "1 s" in asked[0], asked
            text = r.content[0].text
            if answer == "decline":
                assert r.is_error and "declined" in text, text
                assert not list(tmp_path.glob("*.db")), "nothing recorded"
            else:
                assert not r.is_error, text
                assert r.structured_content["trace"], r.structured_content

    try:
        anyio.run(run)
    finally:
        target.kill()
        target.wait()
