"""Round-trip latency over stdio: `causeway mcp` (get_trace_stats, run_sql) beside the Python reference
SQLite MCP server (`mcp-server-sqlite`, its read_query tool) answering the same questions, in the same
run, on the shared Ingero DBs. One raw JSON-RPC client drives both servers the same way (write one
line, read the answer line), so the figures are the servers' own round trips.

    CAUSEWAY_BIN=<causeway> ~/.cache/causeway/venv/bin/python tests/mcp/bench_latency.py [--iterations N]

The reference server opens its DB read-write, so it gets a copy of each DB, never the shared file."""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path.home() / ".cache" / "causeway"
DBS = pathlib.Path(os.environ.get("CAUSEWAY_INGERO_DBS", REPO / "testdata" / "ingero-dbs"))

# The same questions in both servers' terms. mcp-server-sqlite takes only statements that start with
# SELECT, so its version of get_trace_stats is one SELECT with the nearest-rank percentiles inline.
RUN_SQL = "SELECT source, op, COUNT(*) AS n, SUM(duration) AS total_ns FROM events GROUP BY source, op ORDER BY source, op"
STATS_SQL = """SELECT source, op, COUNT(*) AS count, SUM(duration) / 1000.0 AS sum_us, AVG(duration) / 1000.0 AS avg_us,
 MIN(duration) / 1000.0 AS min_us, MAX(duration) / 1000.0 AS max_us,
 MAX(CASE WHEN rn = MAX(1, (500 * n + 999) / 1000) THEN duration END) / 1000.0 AS p50_us,
 MAX(CASE WHEN rn = MAX(1, (900 * n + 999) / 1000) THEN duration END) / 1000.0 AS p90_us,
 MAX(CASE WHEN rn = MAX(1, (950 * n + 999) / 1000) THEN duration END) / 1000.0 AS p95_us,
 MAX(CASE WHEN rn = MAX(1, (990 * n + 999) / 1000) THEN duration END) / 1000.0 AS p99_us
 FROM (SELECT source, op, duration, ROW_NUMBER() OVER (PARTITION BY source, op ORDER BY duration) AS rn,
       COUNT(*) OVER (PARTITION BY source, op) AS n FROM events) GROUP BY source, op ORDER BY source, op"""


class StdioServer:
    """A server process spoken to in newline-delimited JSON-RPC."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")

    def request(self, method, params):
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{method}: the server closed its output")
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                if "error" in msg or msg["result"].get("isError"):
                    raise RuntimeError(f"{method}: {json.dumps(msg)[:300]}")
                return msg["result"]

    def call(self, tool, args):
        return self.request("tools/call", {"name": tool, "arguments": args})

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


def measure(fn, iterations, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"p50": times[len(times) // 2], "p90": times[int(len(times) * 0.9)], "mean": statistics.fmean(times)}


def run(iterations, warmup, db_names):
    causeway = os.environ.get("CAUSEWAY_BIN") or shutil.which("causeway")
    ref = CACHE / "venv-sqlite-ref" / "bin" / "mcp-server-sqlite"
    if not causeway or not ref.exists():
        sys.exit("need CAUSEWAY_BIN and ~/.cache/causeway/venv-sqlite-ref (scripts/install-test-deps.sh)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in db_names:
            db = DBS / name
            copy = pathlib.Path(tmp) / name
            shutil.copy(db, copy)
            cw = StdioServer([causeway, "mcp", "--db", str(db)])
            rf = StdioServer([str(ref), "--db-path", str(copy)])
            try:
                figures = {
                    ("get_trace_stats", "causeway"): measure(lambda: cw.call("get_trace_stats", {}), iterations, warmup),
                    ("get_trace_stats", "reference"): measure(lambda: rf.call("read_query", {"query": STATS_SQL}), iterations, warmup),
                    ("run_sql", "causeway"): measure(lambda: cw.call("run_sql", {"sql": RUN_SQL}), iterations, warmup),
                    ("run_sql", "reference"): measure(lambda: rf.call("read_query", {"query": RUN_SQL}), iterations, warmup),
                }
            finally:
                cw.close()
                rf.close()
            for tool in ("get_trace_stats", "run_sql"):
                c, r = figures[(tool, "causeway")], figures[(tool, "reference")]
                rows.append((name, tool, c, r))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--db", action="append", help="DB file name in the shared folder (default: all)")
    a = ap.parse_args()
    names = a.db or sorted(p.name for p in DBS.glob("*.db"))
    rows = run(a.iterations, a.warmup, names)
    print(f"MCP round trip over stdio, {a.iterations} calls each after {a.warmup} warm-up calls (ms)")
    print(f"{'DB':34} {'TOOL':16} {'causeway p50':>12} {'p90':>8} {'reference p50':>14} {'p90':>8} {'ref/causeway p50':>17}")
    for name, tool, c, r in rows:
        print(f"{name:34} {tool:16} {c['p50']:12.3f} {c['p90']:8.3f} {r['p50']:14.3f} {r['p90']:8.3f} {r['p50'] / c['p50']:16.1f}x")


if __name__ == "__main__":
    main()
