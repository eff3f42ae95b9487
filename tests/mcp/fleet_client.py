"""A real MCP client (the Python MCP SDK over stdio) asking `causeway mcp --lake` about a fleet:
the nodes, the straggler and what it cost per node and job, the clocks, guarded SQL over the lake (and its refusals), the prompt, and a
per-node tool on the straggler's node. Run by cli/tests/fleet.rs after it shipped a job with a
planted straggler: argv = causeway binary, lake string (read-only role), expected straggler node,
rank, first and last late sequence number. PGPASSFILE comes from the environment."""

import os
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main(binary, lake, node, rank, first, last):
    env = {"PGPASSFILE": os.environ["PGPASSFILE"], "CAUSEWAY_LOG": "warn", "HOME": os.environ.get("HOME", "/root")}
    params = StdioServerParameters(command=binary, args=["mcp", "--lake", lake], env=env)
    async with Client(params, mode="auto") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        for t in ["fleet_nodes", "fleet_stragglers", "fleet_collective_waits", "fleet_clock", "fleet_sql", "fleet_costs", "get_causal_chains"]:
            assert t in names, f"{t} not listed: {sorted(names)}"
        nodes = (await client.call_tool("fleet_nodes", {})).structured_content
        assert f"node:{node}" in nodes["traces"], nodes
        s = (await client.call_tool("fleet_stragglers", {})).structured_content
        assert len(s["stragglers"]) == 1, s
        st = s["stragglers"][0]
        assert (st["node"], st["rank"]) == (node, rank), st
        assert (st["episodes"][0]["first_seq"], st["episodes"][0]["last_seq"]) == (first, last), st
        assert len(s["clocks"]) == len(nodes["nodes"]), s
        assert f"rank {rank} on node {node}" in s["summary"], s["summary"]
        # its cost: every other rank's wait, charged to its node and its job
        c = (await client.call_tool("fleet_costs", {})).structured_content
        assert [n["name"] for n in c["costs"]["per_node"]] == [node], c
        assert c["costs"]["per_node"][0]["straggler_gpu_ns"] == st["cost"]["gpu_ns"] == st["waited_ns"], (c, st)
        assert st["cost"]["gpus"] == st["nranks"] - 1, st
        assert len(c["costs"]["per_job"]) == 1 and node in c["summary"], c
        q = (await client.call_tool("fleet_sql", {"sql": f"SELECT count(*) FROM nccl_calls WHERE node = '{node}'"})).structured_content
        assert q["rows"][0][0] > 0, q
        r = await client.call_tool("fleet_sql", {"sql": "SELECT * FROM ducklake_list_files('lake', 'events')"})
        assert r.is_error, r
        prompt = (await client.get_prompt("investigate-fleet", {})).messages[0].content.text
        assert "fleet_stragglers" in prompt and "evidence.sql" in prompt
        stats = await client.call_tool("get_trace_stats", {"trace": f"node:{node}"})
        assert not stats.is_error, stats
        assert "ncclAllReduce" in str(stats.structured_content), "the node's own figures, from the lake"
    print("fleet MCP client: ok")


if __name__ == "__main__":
    b, lake, node, rank, first, last = sys.argv[1:]
    anyio.run(main, b, lake, node, int(rank), int(first), int(last))
