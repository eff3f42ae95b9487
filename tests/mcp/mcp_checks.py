"""What every transport and protocol revision must pass, given a connected `mcp.Client`: the tool list
and its annotations, every tool on every shared DB with figures checked against FACTS.json, errors as
`isError` results, prompts, resources and progress notifications."""

import base64
import json

from mcp import Client
from mcp.shared.exceptions import MCPError

TOOLS = {"list_traces", "get_trace_stats", "get_causal_chains", "get_stacks", "get_timeline", "run_sql",
         "describe_schema", "compare_traces", "get_check", "get_steps", "get_serving", "get_gpu_idle", "get_footprint"}
FIGURES = ["count", "sum_us", "avg_us", "min_us", "max_us", "p50_us", "p90_us", "p95_us", "p99_us"]


def payload(result):
    """The structured content, checked to be the same JSON as the text block."""
    assert not result.is_error, result.content[0].text
    text = json.loads(result.content[0].text)
    assert text == result.structured_content
    return result.structured_content


def error_text(result):
    assert result.is_error, f"expected an isError result, got {result.content[0].text[:200]}"
    return result.content[0].text


async def check_tool_list(client: Client):
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    for t in tools:
        assert t.title, t.name
        assert t.annotations.read_only_hint is True, t.name
        assert t.annotations.open_world_hint is False, t.name
        assert t.output_schema and t.input_schema["type"] == "object", t.name


async def check_figures(client: Client, facts, db_paths):
    names = sorted(facts["dbs"])
    listing = payload(await client.call_tool("list_traces", {}))
    assert [t["index"] for t in listing["traces"]] == list(range(len(names)))
    for i, name in enumerate(names):
        want = facts["dbs"][name]
        t = listing["traces"][i]
        assert t["ok"] and t["events"] == want["events"]["count"], name
        assert (t["first_ns"], t["last_ns"]) == (want["events"]["first_timestamp_ns"], want["events"]["last_timestamp_ns"])
        assert t["sessions_total"] == len(want["sessions"])
        stats = payload(await client.call_tool("get_trace_stats", {"trace": i}))["stats"]
        assert stats["events"] == want["events"]["count"], name
        assert len(stats["ops"]) == len(want["ops"]), name
        for w in want["ops"]:
            got = next(o for o in stats["ops"] if o["source"] == w["source"] and o["op_code"] == w["op_code"])
            for k in FIGURES:
                assert abs(got[k] - w[k]) < 0.0005, f"{name} {w['op']} {k}: {got[k]} != {w[k]}"
        n = payload(await client.call_tool("run_sql", {"trace": t["name"], "sql": "SELECT COUNT(*) AS n FROM events"}))
        assert n["rows"] == [[want["events"]["count"]]], name
        schema = payload(await client.call_tool("describe_schema", {"trace": i, "table": "events"}))["schema"]
        assert schema["tables"][0]["rows"] == want["tables"]["events"], name


async def check_analysis_tools(client: Client, facts):
    names = sorted(facts["dbs"])
    py = names.index("pytorch-dataloader-starvation.db")
    chains = payload(await client.call_tool("get_causal_chains", {"trace": py}))
    assert chains["chains"], "the dataloader-starvation trace has chains"
    assert chains["summary"] and chains["chains"][0]["id"] == "c1"
    for brief in chains["chains"][:3]:
        # a default list is brief (the first chain's SQL only): each chain in full by its id
        c = payload(await client.call_tool("get_causal_chains", {"trace": py, "chain_id": brief["id"]}))["chains"][0]
        ev = c["evidence"]
        assert (ev["value"], ev["event_ids"][:3]) == (brief["evidence"]["value"], brief["evidence"]["event_ids"])
        r = payload(await client.call_tool("run_sql", {"trace": py, "sql": ev["sql"]}))
        assert r["columns"][-1] == "value" or "value" in r["columns"], r["columns"]
        assert r["rows"][0][r["columns"].index("value")] == ev["value"], f"chain {c['id']}: evidence SQL does not reproduce its value"
    one = payload(await client.call_tool("get_causal_chains", {"trace": py, "chain_id": "c1"}))
    assert [c["id"] for c in one["chains"]] == ["c1"]
    assert [b.type for b in (await client.call_tool("get_causal_chains", {"trace": py})).content] == ["text"]
    pictured = await client.call_tool("get_causal_chains", {"trace": py, "chain_id": "c1", "picture": True})
    payload(pictured)
    images = [b for b in pictured.content if b.type == "image"]
    mime = lambda b: getattr(b, "mime_type", None) or getattr(b, "mimeType")  # noqa: E731
    assert len(images) == 1 and mime(images[0]) == "image/svg+xml", [b.type for b in pictured.content]
    svg = base64.b64decode(images[0].data).decode()
    assert svg.startswith("<svg") and 'data-chain="c1"' in svg and 'class="chain-timeline"' in svg, svg[:200]
    worst = one["chains"][0]["evidence"]["event_ids"][0]
    assert f'data-event-id="{worst}"' in svg, "the picture shows the chain's worst call"

    want = facts["dbs"]["pytorch-dataloader-starvation.db"]["stacks"]["top_cudaLaunchKernel_stacks"][0]
    stacks = payload(await client.call_tool("get_stacks", {"trace": py, "op": "cudaLaunchKernel"}))["stacks"]
    top = stacks["by_count"][0]
    assert (top["stack_hash"], top["calls"]) == (want["stack_hash"], want["calls"])
    assert any("gpu_kernel_impl_nocast" in f["text"] for f in top["frames"])

    tl = payload(await client.call_tool("get_timeline", {"trace": py}))
    assert tl["timeline"]["threads"] and "chain c1" in tl["summary"]

    cmp = payload(await client.call_tool("compare_traces", {"limit": 500}))
    assert (cmp["baseline"]["trace"], cmp["candidate"]["trace"]) == (names[0].removesuffix(".db"), names[1].removesuffix(".db"))
    want1 = {o["op"]: o["count"] for o in facts["dbs"][names[1]]["ops"]}
    got1 = {o["op"]: o["candidate"]["count"] for o in cmp["ops"] if o["candidate"]}
    assert got1 == want1
    halves = payload(await client.call_tool("compare_traces", {"baseline": {"trace": py}}))
    assert halves["baseline"]["events"] + halves["candidate"]["events"] == facts["dbs"][names[py]]["events"]["count"]

    check = payload(await client.call_tool("get_check", {}))
    assert check["report"]["kernel"] and check["report"]["items"]

    # an Ingero DB holds no serving engine's metrics: said so
    serving = payload(await client.call_tool("get_serving", {"trace": py}))
    assert not serving["serving"]["engines"] and "no serving engine" in serving["summary"], serving
    # nor the device's own timeline: said so, with how to record one
    idle = payload(await client.call_tool("get_gpu_idle", {"trace": py}))
    assert "device" not in idle and "no device timeline" in idle["summary"] and "--gpu-timeline" in idle["hint"], idle


async def check_errors(client: Client):
    msg = error_text(await client.call_tool("run_sql", {"sql": "SELEC nonsense"}))
    assert "describe_schema" in msg or "syntax" in msg.lower()
    msg = error_text(await client.call_tool("run_sql", {"sql": "DELETE FROM events"}))
    assert "refused" in msg or "read-only" in msg or "only" in msg
    msg = error_text(await client.call_tool("get_trace_stats", {"trace": "no-such-trace"}))
    assert "sample-cluster" in msg, msg
    msg = error_text(await client.call_tool("get_trace_stats", {"pid": "not a number"}))
    assert "invalid arguments" in msg
    msg = error_text(await client.call_tool("get_trace_stats", {"opz": ["x"]}))
    assert "unknown field" in msg
    msg = error_text(await client.call_tool("get_trace_stats", {"ops": ["cudaNothing"]}))
    assert "unknown op" in msg
    msg = error_text(await client.call_tool("get_causal_chains", {"chain_id": "c999"}))
    assert "no chain" in msg
    try:
        await client.call_tool("no_such_tool", {})
        raise AssertionError("an unknown tool must be a protocol error")
    except MCPError as e:
        assert e.code == -32602
    # The server keeps serving.
    assert payload(await client.call_tool("run_sql", {"sql": "SELECT 1 AS one"}))["rows"] == [[1]]


async def check_prompts(client: Client):
    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(prompts) == {"investigate", "compare-runs", "explain-chain", "investigate-fleet"}
    text = (await client.get_prompt("investigate", {"focus": "cudaStreamSync"})).messages[0].content.text
    assert "get_trace_stats" in text and "get_causal_chains" in text and "evidence.sql" in text and "cudaStreamSync" in text
    text = (await client.get_prompt("compare-runs", {})).messages[0].content.text
    assert "compare_traces" in text
    text = (await client.get_prompt("explain-chain", {"chain_id": "c1"})).messages[0].content.text
    assert 'chain_id: "c1"' in text and "run_sql" in text
    try:
        await client.get_prompt("explain-chain", {})
        raise AssertionError("explain-chain without chain_id must fail")
    except MCPError as e:
        assert "chain_id" in e.error.message


async def check_resources(client: Client):
    uris = [r.uri for r in (await client.list_resources()).resources]
    assert "causeway://traces" in uris
    assert "causeway://traces/pytorch-dataloader-starvation/schema" in uris
    templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
    assert "causeway://traces/{trace}/chains/{chain_id}" in templates
    schema = json.loads((await client.read_resource("causeway://traces/sample-cluster/schema")).contents[0].text)
    assert any(t["name"] == "events" for t in schema["schema"]["tables"])
    chain = json.loads((await client.read_resource("causeway://traces/pytorch-dataloader-starvation/chains/c1")).contents[0].text)
    assert chain["chain"]["id"] == "c1" and chain["chain"]["evidence"]["sql"]
    session = json.loads((await client.read_resource("causeway://traces/sample-gpu-node-01/session")).contents[0].text)
    assert session["traces"][0]["name"] == "sample-gpu-node-01"
    try:
        await client.read_resource("causeway://traces/sample-cluster/nothing")
        raise AssertionError("an unknown resource must be a protocol error")
    except MCPError:
        pass


async def check_progress(client: Client):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    await client.call_tool("get_causal_chains", {"trace": 1}, progress_callback=on_progress)
    assert seen, "no progress notification for a call that asked for them"
    assert all(m and "get_causal_chains" in m for _, m in seen)
    values = [p for p, _ in seen]
    assert values == sorted(set(values)), f"progress must increase: {values}"
    assert "done" in seen[-1][1]


async def check_everything(client: Client, facts, db_paths):
    await check_tool_list(client)
    await check_figures(client, facts, db_paths)
    await check_analysis_tools(client, facts)
    await check_errors(client)
    await check_prompts(client)
    await check_resources(client)
    await check_progress(client)
