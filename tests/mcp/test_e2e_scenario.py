"""End to end, through MCP only: the cpu-contention scenario of tests/scenarios/run.py (a mock-CUDA
workload whose feeding thread is pinned to a CPU, and a real CPU hog planted on that CPU) traced live
by the `capture_trace` tool of `causeway mcp --allow-capture` (the workload binary on the allow-list),
then investigated by the Python `mcp` client following the `investigate` prompt's steps in order.
The server is reached over HTTP: a stdio server is started in a new session, and with scheduler
autogroups (the default) a new session is a separate CPU group, which the hog would not preempt.
The first chain must name the planted hog (pid, comm, CPU), and its evidence SQL, run through
`run_sql`, must return the chain's figure. Also: without `--allow-capture` the tool is absent, and a
command off the allow-list is refused. Needs root (eBPF), like CI."""

import importlib.util
import os
import re
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import REPO, causeway_bin, start_http, stop
from mcp_checks import TOOLS, error_text, payload


def scenarios():
    """tests/scenarios/run.py as a module (its build(), Planted, VARIANTS, scenarios, checks)."""
    spec = importlib.util.spec_from_file_location("causeway_scenarios", REPO / "tests" / "scenarios" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def require_root():
    if os.geteuid() != 0:
        pytest.fail("the end-to-end scenario traces with eBPF: run the MCP client tests as root (CI does)")


def stdio(args, env=None):
    e = {"CAUSEWAY_LOG": "warn", "NO_COLOR": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    e.update(env or {})
    return Client(StdioServerParameters(command=causeway_bin(), args=args, env=e), mode="auto")


def tools_in_order(prompt_text):
    """The tool names the prompt mentions, in the order it first mentions them."""
    order = []
    for name in re.findall(r"`([a-z_]+)`", prompt_text):
        if name in TOOLS and name not in order:
            order.append(name)
    return order


def test_cpu_contention_captured_and_explained_through_mcp(tmp_path):
    require_root()
    scen = scenarios()
    scen.build()
    v = scen.VARIANTS["default"]
    planted_argv, workload, env, check = scen.scenarios(v)["cpu-contention"]
    program = workload[0]
    hog = scen.Planted(planted_argv[0])
    try:
        time.sleep(0.3)  # let the hog reach its steady state, as run.py does
        server = start_http([], ["--allow-capture", "--capture-allow", program, "--capture-dir", str(tmp_path)], env)

        async def run():
            async with Client(server.url, mode="auto") as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert set(listed) == TOOLS | {"capture_trace", "open_gpu_window"}
                a = listed["capture_trace"].annotations
                assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) == (False, False, False, False)
                assert program in listed["capture_trace"].description or os.path.realpath(program) in listed["capture_trace"].description

                progress = []

                async def on_progress(p, total, message):
                    progress.append((p, total, message))

                # The workload by its file name, as an agent would give it; it ends the trace when it exits.
                cap = payload(await client.call_tool(
                    "capture_trace", {"command": [os.path.basename(program), *workload[1:]], "duration_s": 60},
                    progress_callback=on_progress, read_timeout_seconds=200.0))
                assert cap["command_exit"] == 0, cap
                assert cap["events_written"] > 0 and cap["libraries"], cap
                assert os.path.dirname(cap["path"]) == str(tmp_path) and os.path.exists(cap["path"])
                assert progress and all("capture_trace" in m for _, _, m in progress), progress
                values = [p for p, _, _ in progress]
                assert values == sorted(set(values)), f"progress must increase: {values}"
                assert "done" in progress[-1][2]
                return cap, await investigate(client, cap["trace"])

        try:
            cap, (chains, sql) = anyio.run(run)
        finally:
            stop(server)
    finally:
        hog.stop()

    # The chain returned through MCP names the planted culprit: the same check as the scenario suite.
    err = check({"chains": chains}, [hog], v)
    assert err is None, f"{err}; first chain: {chains[0]['summary'] if chains else None}"
    c = chains[0]
    assert c["culprit"]["pid"] == hog.pid and c["culprit"]["comm"] == hog.name
    assert c["cpus"][0]["cpu"] == v["cpu"]
    # Its evidence SQL, through run_sql, returns the chain's figure.
    assert "value" in sql["columns"], sql["columns"]
    assert sql["rows"][0][sql["columns"].index("value")] == c["evidence"]["value"], (sql["rows"], c["evidence"])
    assert c["evidence"]["value"] > 0


async def investigate(client, trace):
    """Follow the investigate prompt: its tools, in its order, on the captured trace."""
    prompt = (await client.get_prompt("investigate", {})).messages[0].content.text
    order = tools_in_order(prompt)
    assert order[:7] == ["list_traces", "get_gpu_idle", "get_trace_stats", "get_causal_chains", "get_steps",
                         "get_serving", "run_sql"], order
    assert {"get_timeline", "get_stacks", "describe_schema"} <= set(order), order
    chains = sql = None
    for name in order:
        if name == "list_traces":
            listing = payload(await client.call_tool(name, {}))
            assert [t["name"] for t in listing["traces"]] == [trace] and listing["traces"][0]["ok"]
        elif name == "get_gpu_idle":
            # captured without --gpu-timeline: the device view is said to be missing, not empty
            idle = payload(await client.call_tool(name, {"trace": trace}))
            assert "device" not in idle and "no device timeline" in idle["summary"], idle
        elif name == "get_trace_stats":
            stats = payload(await client.call_tool(name, {"trace": trace, "per_process": True}))["stats"]
            assert stats["events"] > 0 and any(o["op"] == "sched_switch" for o in stats["ops"])
        elif name == "get_causal_chains":
            out = payload(await client.call_tool(name, {"trace": trace}))
            chains = out["chains"]
            assert chains, out["summary"]
        elif name == "get_steps":
            # the hog's workload is no training loop with labels: its steps are inferred, or said absent
            steps = payload(await client.call_tool(name, {"trace": trace}))
            assert steps["summary"] and all(s["origin"] == "inferred" for s in steps["steps"]["series"]), steps
        elif name == "get_serving":
            # the hog's workload serves nothing: said so, not an empty answer
            serving = payload(await client.call_tool(name, {"trace": trace}))
            assert not serving["serving"]["engines"] and "no serving engine" in serving["summary"], serving
        elif name == "run_sql":
            sql = payload(await client.call_tool(name, {"trace": trace, "sql": chains[0]["evidence"]["sql"]}))
        elif name == "get_timeline":
            tl = payload(await client.call_tool(name, {"trace": trace, "around": chains[0]["evidence"]["event_ids"][0]}))
            assert tl["timeline"]["threads"]
        elif name == "get_stacks":
            payload(await client.call_tool(name, {"trace": trace, "op": chains[0]["op"]}))
        elif name == "describe_schema":
            schema = payload(await client.call_tool(name, {"trace": trace, "table": "events"}))["schema"]
            assert schema["tables"][0]["name"] == "events"
    return chains, sql


def test_capture_is_absent_without_the_flag_and_refuses_what_is_not_allowed(db_paths, tmp_path):
    async def without_flag():
        async with stdio(["mcp", "--db", db_paths[0]]) as client:
            assert "capture_trace" not in {t.name for t in (await client.list_tools()).tools}
            with pytest.raises(MCPError) as e:  # an unknown tool: a protocol error
                await client.call_tool("capture_trace", {"pids": [os.getpid()]})
            assert e.value.code == -32602 and "capture_trace" in e.value.error.message

    anyio.run(without_flag)

    allowed = "/bin/true"

    async def with_flag():
        async with stdio(["mcp", "--db", db_paths[0], "--allow-capture", "--capture-allow", allowed, "--capture-dir", str(tmp_path)]) as client:
            msg = error_text(await client.call_tool("capture_trace", {"command": ["/bin/sh", "-c", "id"]}))
            assert "not an allowed program" in msg and os.path.realpath(allowed) in msg, msg
            msg = error_text(await client.call_tool("capture_trace", {}))
            assert "nothing to trace" in msg
            msg = error_text(await client.call_tool("capture_trace", {"pids": [999_999_999]}))
            assert "no process 999999999" in msg
            msg = error_text(await client.call_tool("capture_trace", {"pids": [os.getpid()], "duration_s": 500}))
            assert "out of range" in msg
            # Nothing was written, and the server still serves.
            assert os.listdir(tmp_path) == []
            assert payload(await client.call_tool("run_sql", {"sql": "SELECT 1 AS one"}))["rows"] == [[1]]
            assert len(payload(await client.call_tool("list_traces", {}))["traces"]) == 1

    anyio.run(with_flag)
