"""A small-context client, as ollmcp drives Causeway with a model in Ollama: over stdio, it hands the
model each tool as Ollama's function format (name, description, input schema; never the output
schema), the `investigate` prompt's text, and the text content of each tool answer (never the
structured content). The whole exchange of the prompt (its text, the tool list as sent, and the
answers of the calls the prompt asks for, with default arguments: get_gpu_idle, get_trace_stats,
get_causal_chains, run_sql of the top chain's evidence SQL, get_timeline around its first event,
get_stacks, describe_schema; and the arguments of each call) must fit a 16k-token context
on every bundled investigation.

The rule: 4 characters per token, so 16,384 tokens are 65,536 characters; the exchange is held to
64,000, leaving the rest for the model's own turns. What is sent is shrunk to fit (descriptions,
the prompt, default answers), never the rule loosened."""

import json
import pathlib

import anyio
import pytest
from mcp import Client, StdioServerParameters

from conftest import REPO, causeway_bin

CHARS_PER_TOKEN = 4
CONTEXT_TOKENS = 16_000
BUDGET_CHARS = CONTEXT_TOKENS * CHARS_PER_TOKEN  # 64,000

INVESTIGATIONS = sorted(p.parent for p in (REPO / "investigations").glob("*/trace.db"))


def ollama_tools(tools):
    """The tool list as ollmcp sends it to Ollama: function name, description, parameters."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema}}
        for t in tools
    ]


def answer_text(result):
    """What such a client puts in the model's context for a tool's answer: its text parts."""
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def exchange(db: pathlib.Path):
    """Every message of the `investigate` prompt's exchange, as (what, text) pairs."""
    params = StdioServerParameters(command=causeway_bin(), args=["mcp", "--db", str(db)],
                                   env={"CAUSEWAY_LOG": "warn", "NO_COLOR": "1"})
    out = []
    async with Client(params, mode="legacy") as client:
        prompt = await client.get_prompt("investigate", {})
        out.append(("prompt", "\n".join(m.content.text for m in prompt.messages)))
        tools = (await client.list_tools()).tools
        out.append(("tools", json.dumps(ollama_tools(tools))))

        async def call(name, args):
            r = await client.call_tool(name, args)
            assert not r.is_error, f"{name} {args}: {answer_text(r)}"
            # the model's call (its arguments, the evidence SQL among them) and the answer it reads
            out.append((name, json.dumps(args) + answer_text(r)))
            return r

        # the calls the prompt asks for, in its order, with default arguments
        await call("get_gpu_idle", {})
        await call("get_trace_stats", {})
        chains = (await call("get_causal_chains", {})).structured_content
        top = (chains.get("chains") or [None])[0]
        if top:
            await call("run_sql", {"sql": top["evidence"]["sql"]})
            ids = top["evidence"].get("event_ids") or []
            if ids:
                await call("get_timeline", {"around": ids[0]})
            # a chain of slow calls names an op get_stacks knows; a gap or detector chain does not
            await call("get_stacks", {"op": top["op"]} if top["kind"] == "slow_calls" else {})
        # step 7, for what the tools do not answer: the schema, to write SQL against
        await call("describe_schema", {})
    return out


@pytest.mark.parametrize("db", INVESTIGATIONS, ids=[p.name for p in INVESTIGATIONS])
def test_the_investigate_exchange_fits_a_small_context(db):
    parts = anyio.run(exchange, db / "trace.db")
    sizes = {what: len(text) for what, text in parts}
    total = sum(sizes.values())
    report = ", ".join(f"{w}: {n}" for w, n in sizes.items())
    print(f"{db.name}: {total} chars ({report})")
    assert total <= BUDGET_CHARS, f"{db.name}: the investigate exchange is {total} chars > {BUDGET_CHARS}: {report}"
