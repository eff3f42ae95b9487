#!/usr/bin/env python3
"""Record the bundled investigations: each scenario of tests/scenarios/run.py traced for real (as
root) at half size, kept as investigations/NAME/trace.db, with a README whose figures come from
`causeway explain` on that very trace. `python3 investigations/record.py [NAME ...]`."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "scenarios"))
import run  # noqa: E402

PLANTED = {
    "cpu-contention": "A CPU hog named `backup-rsync`, pinned with `taskset` to the CPU the training loop's "
                      "GPU-feeding thread (`train-gpu`) is pinned to. The feeding thread does 1.5 ms of host "
                      "work per step and its synchronize calls spin (the CUDA runtime's default with a free core), "
                      "like a vLLM engine thread.",
    "io-storm": "A process named `nightly-backup` writing with O_DIRECT|O_DSYNC in two threads while the feeding "
                "thread reads a 16 MiB shard with O_DIRECT every 8 steps.",
    "dataloader-starvation": "One DataLoader producer thread (`dataloader0`) that needs 20 ms per batch, feeding a "
                             "GPU thread whose step takes under 2 ms.",
    "allocator-churn": "60 cudaMalloc/cudaFree pairs per step with every other block leaked, on a mock allocator that "
                       "fragments (MOCK_CUDA_FRAG=1: first-fit over a free list that never coalesces).",
    "sync-storm": "A cudaDeviceSynchronize after every kernel launch (8 launches per step).",
    "clean": "Nothing: the same spinning, pinned feeding thread as cpu-contention, with an innocent CPU hog "
             "(`log-shipper`) pinned to the other CPU. No HIGH chain may appear and the bystander is never blamed.",
}


def explain(cw, db):
    out = subprocess.run([cw, "explain", "--db", db, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def readme(name, db_rel, ex):
    chains = ex["chains"]
    lines = [f"# {name}", "", "Recorded by `causeway trace` on the mock CUDA runtime (`python3 investigations/record.py`).", "",
             "## What was planted", "", PLANTED[name], "", "## What `causeway explain` finds", ""]
    lines.append(f"`causeway explain --db investigations/{db_rel}` ({ex['gpu_calls']} GPU calls, {ex['slow_calls']} slow):")
    lines.append("")
    for c in chains[:3]:
        lines.append(f"- **{c['id']} {c['severity']}** ({c['cause']}): {c['summary']}")
    if chains:
        top = chains[0]
        lines += ["", "## The query that shows it", "",
                  f"The headline figure of {top['id']} ({top['evidence']['value']} {top['evidence']['unit']}) is "
                  "reproduced exactly by its evidence SQL:", "", "```sh",
                  f"causeway query --db investigations/{db_rel} \"$(causeway explain --db investigations/{db_rel} --json "
                  "| python3 -c 'import json,sys; print(json.load(sys.stdin)[\"chains\"][0][\"evidence\"][\"sql\"])')\"",
                  "```", "", "```sql", top["evidence"]["sql"], "```"]
    lines += ["", "Open it from an MCP client: `causeway mcp --db investigations/" + db_rel + "` (see the top-level README).", ""]
    return "\n".join(lines)


def main():
    cw = run.causeway_bin(None)
    run.build()
    names = sys.argv[1:] or list(PLANTED)
    for name in names:
        keep = tempfile.mkdtemp(prefix="causeway-record-")
        err, ex = run.run_one(cw, name, "default", keep, shrink=True)
        if err:
            sys.exit(f"record.py: {name} did not reproduce its planted cause: {err}")
        os.makedirs(os.path.join(HERE, name), exist_ok=True)
        db = os.path.join(HERE, name, "trace.db")
        shutil.copy(os.path.join(keep, f"{name}-default.db"), db)
        shutil.rmtree(keep, ignore_errors=True)
        ex = explain(cw, db)
        with open(os.path.join(HERE, name, "README.md"), "w") as f:
            f.write(readme(name, f"{name}/trace.db", ex))
        print(f"{name}: {os.path.getsize(db) / 1e6:.1f} MB, first chain: {ex['chains'][0]['summary'][:100]}")


if __name__ == "__main__":
    main()
