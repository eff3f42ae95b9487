#!/usr/bin/env python3
"""Self-test of analyze.py without a GPU or a causeway binary: builds synthetic traces with the schema
the repository writes (NATIVE_DDL and INDEXES from backends/src/schema.rs, the op lookup table from
model/src/codes.rs; kernel_names, launch_configs, attachments and events.launch_config as the run
expects them, unless schema.rs already defines them), writes the programs' logs, runs every
analyze.py subcommand on them and checks the rows it writes: a clean trace gives no FAIL, a trace
with one call missing (or an unnamed launch, a wrong culprit, a missed first cudaMalloc) gives the
FAIL it should. The queries go once through sqlite3 and once through a stand-in `causeway query`.
timeline_selftest.py does the same for timeline_check.py (the device timeline's step).

    python3 scripts/gpu-check/selftest.py        # prints 'selftest: N checks passed' or exits 1
"""

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ANALYZE = os.path.join(HERE, "analyze.py")

EXTRA_DDL = {
    "kernel_names": "CREATE TABLE kernel_names (pid INTEGER NOT NULL, handle INTEGER NOT NULL, name TEXT NOT NULL, "
                    "mangled TEXT NOT NULL DEFAULT '', how TEXT NOT NULL DEFAULT '', PRIMARY KEY (pid, handle))",
    "launch_configs": "CREATE TABLE launch_configs (key INTEGER PRIMARY KEY, grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, "
                      "grid_z INTEGER NOT NULL, block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL, "
                      "shared_mem_bytes INTEGER NOT NULL, cluster_x INTEGER NOT NULL, cluster_y INTEGER NOT NULL, cluster_z INTEGER NOT NULL)",
    "attachments": "CREATE TABLE attachments (session_id INTEGER NOT NULL, pid INTEGER NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL, "
                   "how TEXT NOT NULL, attached_at INTEGER NOT NULL, complete INTEGER NOT NULL, symbols TEXT NOT NULL DEFAULT '[]', "
                   "missing TEXT NOT NULL DEFAULT '[]', note TEXT NOT NULL DEFAULT '')",
}

FAILURES = []
PASSED = [0]


def expect(cond, what):
    if cond:
        PASSED[0] += 1
    else:
        FAILURES.append(what)
        print(f"SELFTEST FAIL: {what}", flush=True)


def schema():
    src = open(os.path.join(ROOT, "backends", "src", "schema.rs")).read()
    ddl = re.search(r'NATIVE_DDL: &str = r#"(.*?)"#;', src, re.S).group(1)
    # The plain indexes of `schema::indexes()` (the partial ones are formatted at run time).
    idx = "\n".join(re.findall(r"CREATE INDEX IF NOT EXISTS \w+ ON events\([a-z_, ]+\);", src))
    codes = open(os.path.join(ROOT, "model", "src", "codes.rs")).read()
    ops = [(int(s), int(o), n) for s, o, n in re.findall(r'\((\d+), (\d+), "([^"]+)", OpKind::', codes)]
    return ddl, idx, ops


class Db:
    def __init__(self, path):
        ddl, idx, ops = schema()
        self.c = sqlite3.connect(path)
        self.c.executescript(ddl)
        for t, d in EXTRA_DDL.items():
            if not self.c.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone():
                self.c.execute(d)
        cols = [r[1] for r in self.c.execute("PRAGMA table_info(events)")]
        if "launch_config" not in cols:
            self.c.execute("ALTER TABLE events ADD COLUMN launch_config INTEGER")
        self.c.executemany("INSERT OR REPLACE INTO ops (source_id, op_id, name, description) VALUES (?, ?, ?, '')", ops)
        self.c.execute("INSERT INTO sessions (started_at, stopped_at) VALUES (1, 2)")
        self.idx = idx
        self.next_id = 1

    def ev(self, ts, pid, tid, source, op, dur, arg0=0, arg1=0, lc=None, **kw):
        cols = {"id": self.next_id, "timestamp": ts, "pid": pid, "tid": tid, "source": source, "op": op, "duration": dur,
                "arg0": arg0, "arg1": arg1, "session_id": 1, "launch_config": lc, "comm": kw.pop("comm", "prog")}
        cols.update(kw)
        self.next_id += 1
        self.c.execute(f"INSERT INTO events ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(cols.values()))

    def close(self):
        self.c.executescript(self.idx)
        self.c.commit()
        self.c.close()


def rows_of(path):
    if not os.path.exists(path):
        return []
    return [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]


def run(args, rows, causeway=None):
    cmd = [sys.executable, ANALYZE, "--rows", rows] + (["--causeway", causeway] if causeway else []) + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r


def fails(rows):
    return [r for r in rows_of(rows) if r[3] == "FAIL"]


# ------------------------------------------------------------------------------------------- counts

CALLS = {
    "cudaLaunchKernel": 1010, "cudaLaunchKernelExC": 100, "cudaMemcpyAsync:HostToDevice": 100,
    "cudaMemcpyAsync:DeviceToHost": 100, "cudaMemcpyAsync:DeviceToDevice": 100, "cudaStreamSynchronize": 100,
    "cudaEventSynchronize": 50, "cudaMalloc": 20, "cudaFree": 20, "cudaMallocAsync": 10, "cudaFreeAsync": 10,
    "cudaMemsetAsync": 10, "cudaHostAlloc": 1, "cudaStreamBeginCapture": 1, "cudaStreamEndCapture": 1,
    "cudaGraphInstantiate": 1, "cudaGraphLaunch": 50, "cudaDeviceSynchronize": 10, "cudaSetDevice": 1,
}
# runtime API -> (source, op, arg1, driver op inside or None)
SYNTH = {
    "cudaLaunchKernel": (1, 3, 0, (4, 1)), "cudaLaunchKernelExC": (1, 14, 0, (4, 9)),
    "cudaMemcpyAsync:HostToDevice": (1, 7, 1, (4, 3)), "cudaMemcpyAsync:DeviceToHost": (1, 7, 2, (4, 3)),
    "cudaMemcpyAsync:DeviceToDevice": (1, 7, 3, (4, 3)), "cudaStreamSynchronize": (1, 5, 0, (4, 8)),
    "cudaEventSynchronize": (1, 13, 0, None), "cudaMalloc": (1, 1, 0, (4, 5)), "cudaFree": (1, 2, 0, (4, 7)),
    "cudaMallocAsync": (1, 16, 0, (4, 15)), "cudaFreeAsync": (1, 17, 0, (4, 16)), "cudaMemsetAsync": (1, 15, 0, (4, 10)),
    "cudaHostAlloc": (1, 18, 0, None), "cudaStreamBeginCapture": (8, 1, 0, None), "cudaStreamEndCapture": (8, 2, 0, None),
    "cudaGraphInstantiate": (8, 3, 0, None), "cudaGraphLaunch": (8, 4, 0, (8, 5)), "cudaDeviceSynchronize": (1, 6, 0, (4, 4)),
    "cudaSetDevice": (1, 22, 0, None),
}


def counts_trace(path, pid, drop=None, unnamed=False, static=False):
    db = Db(path)
    tid, ts = pid, 1_700_000_000_000_000_000
    db.c.execute("INSERT INTO kernel_names VALUES (?, ?, ?, ?, 'register')", (pid, 0x1000, "cw_step(float*, int)", "_Z7cw_stepPfi"))
    db.c.execute("INSERT INTO kernel_names VALUES (?, ?, ?, ?, 'register')", (pid, 0x2000, "cw_cluster(float*, int)", "_Z10cw_clusterPfi"))
    db.c.execute("INSERT INTO kernel_names VALUES (?, ?, ?, ?, 'register')", (pid, 0x3000, "cw_graph_node(float*, int, int)", "_Z13cw_graph_nodePfii"))
    db.c.execute("INSERT INTO launch_configs VALUES (77, 256, 1, 1, 256, 1, 1, 0, 2, 1, 1)")
    db.c.execute("INSERT INTO launch_configs VALUES (78, 256, 1, 1, 256, 1, 1, 0, 1, 1, 1)")
    kinds = (["driver"] if static else ["runtime", "driver"])
    for k in kinds:
        db.c.execute("INSERT INTO attachments VALUES (1, ?, ?, ?, 'loaded', ?, 1, '[]', '[]', '')", (pid, f"/usr/lib/lib{k}.so", k, ts))
    for api, n in CALLS.items():
        s, o, arg1, inner = SYNTH[api]
        if drop == api:
            n -= 1
        for i in range(n):
            arg0 = {3: 0x3000 if i >= 1000 else 0x1000, 14: 0x2000}.get(o, 4096) if s == 1 else 0
            if unnamed and api == "cudaLaunchKernel" and i == 5:
                arg0 = 0x9999
            lc = 77 if (s, o) == (1, 14) else (78 if (s, o) == (1, 3) else None)
            if not static:
                db.ev(ts, pid, tid, s, o, 10_000, arg0=arg0, arg1=arg1, lc=lc)
            if inner:
                db.ev(ts + 1_000, pid, tid, inner[0], inner[1], 5_000, arg0=0x5000, lc=77 if inner == (4, 9) else None)
            ts += 20_000
    # A driver call outside any runtime call, and an off-CPU interval (not a GPU call).
    db.ev(ts + 100, pid, tid, 4, 1, 3_000, arg0=0x5000)
    db.ev(ts + 50_000, pid, tid, 3, 1, 40_000, prev_state=1)
    db.close()


def program_log(path, pid, extra=""):
    with open(path, "w") as f:
        f.write(f"PID {pid}\n")
        for api, n in CALLS.items():
            f.write(f"CALLS {api} {n}\n")
        f.write("KERNELS cw_step cw_cluster cw_graph_node\nDONE\n" + extra)


def test_counts(tmp, causeway):
    pid = 4242
    log = os.path.join(tmp, "counts.out")
    program_log(log, pid)
    for how in ("sqlite3", "causeway query"):
        db = os.path.join(tmp, f"counts-{how[:3]}.db")
        counts_trace(db, pid)
        rows = os.path.join(tmp, f"rows-counts-{how[:3]}.tsv")
        r = run_counts(db, log, rows, causeway, force_cli=(how != "sqlite3"))
        expect(r.returncode == 0, f"counts ({how}) ran: {r.stderr[-600:]}")
        expect(not fails(rows), f"counts ({how}): clean trace has no FAIL: {fails(rows)}")
        got = {x[0]: x for x in rows_of(rows)}
        expect(got.get("counts_shared: cudaLaunchKernel count", [None] * 4)[3] == "PASS", f"counts ({how}): launch count row PASS")
        expect(got.get("counts_shared: kernel names resolve", [None] * 4)[3] == "PASS", f"counts ({how}): kernel names PASS")
        expect(got.get("counts_shared: ExC launches carry cluster (2,1,1)", [None] * 4)[3] == "PASS", f"counts ({how}): cluster PASS")
        expect("cudaLaunchKernel->cuLaunchKernel 1010/1010" in got.get("counts_shared: nesting map", ["", "", ""])[2],
               f"counts ({how}): nesting map names the pair: {got.get('counts_shared: nesting map')}")
    nest = open(os.path.join(tmp, "nesting.txt")).read()
    expect("cuLaunchKernel" in nest and "top level" in nest, "nesting map file written with a top-level row")

    # One cudaMemcpyAsync D2H missing, one launch unnamed: both FAIL.
    db = os.path.join(tmp, "counts-bad.db")
    counts_trace(db, pid, drop="cudaMemcpyAsync:DeviceToHost", unnamed=True)
    rows = os.path.join(tmp, "rows-counts-bad.tsv")
    run_counts(db, log, rows, causeway)
    bad = {x[0] for x in fails(rows)}
    expect("counts_shared: cudaMemcpyAsync:DeviceToHost count" in bad, f"missing copy is a FAIL: {bad}")
    expect("counts_shared: kernel names resolve" in bad, f"unnamed launch is a FAIL: {bad}")

    # Static: no runtime events, driver events present -> PASS.
    db = os.path.join(tmp, "counts-static.db")
    counts_trace(db, pid, static=True)
    rows = os.path.join(tmp, "rows-counts-static.tsv")
    r = subprocess.run([sys.executable, ANALYZE, "--rows", rows, "counts", "--db", db, "--program-log", log, "--label", "counts_static",
                        "--static"], capture_output=True, text=True, timeout=120)
    expect(r.returncode == 0, f"static counts ran: {r.stderr[-600:]}")
    expect(not fails(rows), f"static: no FAIL: {fails(rows)}")
    got = {x[0]: x for x in rows_of(rows)}
    expect(got.get("counts_static: runtime visibility", [None] * 4)[3] == "PASS", "static: visibility row PASS")


def run_counts(db, log, rows, causeway, force_cli=False):
    args = [sys.executable, ANALYZE, "--rows", rows, "--causeway", causeway, "counts", "--db", db, "--program-log", log,
            "--label", "counts_shared", "--nesting-out", os.path.join(os.path.dirname(rows), "nesting.txt")]
    env = dict(os.environ)
    if force_cli:
        env["PYTHONPATH"] = os.path.join(os.path.dirname(rows), "nosqlite")
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


# -------------------------------------------------------------------------------------------- train

def test_train(tmp, causeway):
    pid, tid, bw = 5151, 5151, 5152
    db = Db(os.path.join(tmp, "train.db"))
    t = 1_700_000_100_000_000_000
    db.c.execute("INSERT INTO kernel_names VALUES (?, 1, 'nvjet_tst_128x64', '', 'module')", (pid,))
    db.c.execute("INSERT INTO kernel_names VALUES (?, 2, 'triton_poi_fused_add_0', '', 'module')", (pid,))
    db.c.execute("INSERT INTO kernel_names VALUES (?, 3, 'void at::native::vectorized_elementwise_kernel<4>', '', 'register')", (pid,))
    phases = []
    for name in ("eager", "compile"):
        # marker A, the window, marker B
        db.ev(t, pid, tid, 1, 6, 50_000)
        t0 = t + 50_000 + 2_000
        ts = t0 + 1_000
        for i in range(30):  # runtime launches with a driver launch inside
            db.ev(ts, pid, tid, 1, 3, 8_000, arg0=3)
            db.ev(ts + 1_000, pid, tid, 4, 1, 4_000, arg0=99)
            ts += 10_000
        for i in range(7):  # top-level cuBLAS launches (Ex) on the backward thread
            db.ev(ts, pid, bw, 4, 9, 6_000, arg0=1)
            ts += 10_000
        n_triton = 12 if name == "compile" else 0
        for i in range(n_triton):
            db.ev(ts, pid, tid, 4, 1, 6_000, arg0=2)
            ts += 10_000
        db.ev(ts, pid, tid, 1, 7, 9_000, arg1=2)
        db.ev(ts + 10_000, pid, tid, 1, 5, 90_000)
        ts += 200_000
        t1 = ts
        db.ev(ts + 1_000, pid, tid, 1, 6, 40_000)
        t = ts + 1_000_000_000
        api = {"cudaLaunchKernel": 30, "cuLaunchKernel": n_triton, "cuLaunchKernelEx": 7, "cudaMemcpyAsync": 1,
               "cudaStreamSynchronize": 1}
        kernels = {"total": 30 + 7 + n_triton + 2, "by_family": {"other": 30, "nvjet": 7 + 2, "triton": n_triton},
                   "by_launcher": {"cudaLaunchKernel": 30, "cuLaunchKernelEx": 7, "cuLaunchKernel": n_triton},
                   "by_family_launcher": {"other": {"cudaLaunchKernel": 30}, "nvjet": {"cuLaunchKernelEx": 7, "cudaLaunchKernelExC": 2},
                                          "triton": {"cuLaunchKernel": n_triton}},
                   "uncorrelated": 0, "examples": {}}
        phases.append({"name": name, "steps": 300, "steps_per_s": 250.0 if name == "eager" else 400.0,
                       "profile": {"t0_ns": t0, "t1_ns": t1, "steps": 20, "api": api, "kernels": kernels}})
    db.close()
    j = os.path.join(tmp, "train.json")
    json.dump({"pid": pid, "phases": phases}, open(j, "w"))
    rows = os.path.join(tmp, "rows-train.tsv")
    r = subprocess.run([sys.executable, ANALYZE, "--rows", rows, "train", "--db", os.path.join(tmp, "train.db"), "--json", j],
                       capture_output=True, text=True, timeout=120)
    expect(r.returncode == 0, f"train ran: {r.stderr[-600:]}")
    expect(not fails(rows), f"train: no FAIL: {fails(rows)}")
    got = {x[0]: x for x in rows_of(rows)}
    expect(got.get("train eager: cudaLaunchKernel in window", [None] * 4)[3] == "PASS", "train: launch equality PASS")
    expect(got.get("train compile: cuLaunchKernel in window", [None] * 4)[3] == "PASS", f"train: top-level driver launches PASS: {got.get('train compile: cuLaunchKernel in window')}")
    gap = got.get("train compile: kernel gap CUPTI - seen", ["", "", ""])[2]
    expect(gap.startswith("2 = 51 - (49 launches"), f"train: gap of the 2 ExC kernels: {gap}")
    expect("nvjet +2" in gap, f"train: gap by family: {gap}")
    # One launch more in the profiler than in the trace: the required equality fails.
    res = json.load(open(j))
    res["phases"][0]["profile"]["api"]["cudaLaunchKernel"] = 31
    jb = os.path.join(tmp, "train-bad.json")
    json.dump(res, open(jb, "w"))
    rows = os.path.join(tmp, "rows-train-bad.tsv")
    subprocess.run([sys.executable, ANALYZE, "--rows", rows, "train", "--db", os.path.join(tmp, "train.db"), "--json", jb],
                   capture_output=True, text=True, timeout=120)
    expect({x[0] for x in fails(rows)} == {"train eager: cudaLaunchKernel in window"}, f"train: a missed launch is the one FAIL: {fails(rows)}")
    # The untraced comparison.
    ju = os.path.join(tmp, "train-untraced.json")
    json.dump({"pid": 1, "phases": [{"name": "eager", "steps_per_s": 300.0}, {"name": "compile", "steps_per_s": 400.0}]}, open(ju, "w"))
    rows = os.path.join(tmp, "rows-overhead.tsv")
    subprocess.run([sys.executable, ANALYZE, "--rows", rows, "overhead", "--traced", j, "--untraced", ju], capture_output=True, timeout=60)
    got = {x[0]: x for x in rows_of(rows)}
    expect("= 0.833" in got.get("overhead eager: steps/s traced / untraced", ["", "", ""])[2], "overhead ratio")
    # Several runs of each kind: medians (of 250, 200, 260 and of 300, 320), every run listed.
    jt2, jt3, ju2 = (os.path.join(tmp, f"overhead-{n}.json") for n in ("t2", "t3", "u2"))
    json.dump({"phases": [{"name": "eager", "steps_per_s": 200.0}]}, open(jt2, "w"))
    json.dump({"phases": [{"name": "eager", "steps_per_s": 260.0}]}, open(jt3, "w"))
    json.dump({"phases": [{"name": "eager", "steps_per_s": 320.0}]}, open(ju2, "w"))
    rows = os.path.join(tmp, "rows-overhead-runs.tsv")
    subprocess.run([sys.executable, ANALYZE, "--rows", rows, "overhead", "--traced", j, jt2, jt3, "--untraced", ju, ju2],
                   capture_output=True, timeout=60)
    got = {x[0]: x for x in rows_of(rows)}
    eager = got.get("overhead eager: steps/s traced / untraced", ["", "", ""])[2]
    expect(eager.startswith("250 / 310 = 0.806"), f"overhead medians: {eager}")
    expect("traced runs 250.0, 200.0, 260.0" in eager and "untraced runs 300.0, 320.0" in eager, f"overhead runs listed: {eager}")


# --------------------------------------------------------------------------------------------- diag

def diag_case(tmp, causeway, label, culprit_pid):
    pid, tid, hog = 6161, 6161, 7777
    dbp = os.path.join(tmp, f"{label}.db")
    db = Db(dbp)
    t = 1_700_000_200_000_000_000
    for i in range(50):
        db.ev(t, pid, tid, 1, 5, 2_000_000)
        db.ev(t + 1_500_000, pid, tid, 3, 1, 1_000_000, prev_state=0, next_pid=hog, next_comm="backup-rsync")
        t += 10_000_000
    db.close()
    ev_sql = f"SELECT sum(duration) AS value FROM events WHERE pid = {pid} AND source = 1 AND op = 5"
    ex = {"verdict": "x", "chains_total": 1, "chains": [{
        "id": "c1", "severity": "HIGH", "kind": "slow_call", "op": "cudaStreamSync", "cause": "preempted",
        "culprit": {"pid": culprit_pid, "tid": culprit_pid, "comm": "backup-rsync", "role": "took_cpu"}, "stall_ns": 50_000_000,
        "share": 0.5, "share_of": "slow time", "summary": "s", "cpus": [{"cpu": 2, "ns": 5}],
        "evidence": {"sql": ev_sql, "value": 100_000_000, "unit": "ns", "event_ids": []}}]}
    exp = os.path.join(tmp, f"{label}.explain.json")
    json.dump(ex, open(exp, "w"))
    hl = os.path.join(tmp, f"{label}.hog.log")
    open(hl, "w").write(f"HOG {hog} backup-rsync\n")
    tj = os.path.join(tmp, f"{label}.json")
    start = 1_700_000_200_000_000_000
    json.dump({"pid": pid, "diag": {"start_ns": start, "end_ns": start + 40_000_000_000, "bin_ns": 500_000_000,
                                    "steps_per_bin": [100] * 20 + [50] * 40 + [100] * 20},
               "nvml": {"samples": [[start + i * 100_000_000, 40 if 100 <= i <= 300 else 90, 10] for i in range(400)]}},
              open(tj, "w"))
    rows = os.path.join(tmp, f"rows-{label}.tsv")
    r = subprocess.run([sys.executable, ANALYZE, "--rows", rows, "--causeway", causeway, "diag", "--db", dbp, "--explain", exp,
                        "--hog-log", hl, "--hog-start-ns", str(start + 10_000_000_000), "--hog-end-ns", str(start + 30_000_000_000),
                        "--train-json", tj, "--label", label, "--required"], capture_output=True, text=True, timeout=120)
    expect(r.returncode == 0, f"diag {label} ran: {r.stderr[-600:]}")
    return dbp, exp, tj, {x[0]: x for x in rows_of(rows)}


def test_diag(tmp, causeway):
    dbp, exp, tj, got = diag_case(tmp, causeway, "diag-spin", 7777)
    expect(got.get("diag-spin: c1 names the hog", [None] * 4)[3] == "PASS", f"diag: hog named: {got.get('diag-spin: c1 names the hog')}")
    expect(got.get("diag-spin: c1 evidence SQL recomputes its figure", [None] * 4)[3] == "PASS",
           f"diag: evidence recomputed: {got.get('diag-spin: c1 evidence SQL recomputes its figure')}")
    expect("40.0% vs 90.0%" in got.get("diag-spin: NVML GPU util during hog vs clean", ["", "", ""])[2], "diag: NVML split")
    expect("100.0 vs 200.0" in got.get("diag-spin: steps/s during hog vs clean", ["", "", ""])[2],
           f"diag: steps split {got.get('diag-spin: steps/s during hog vs clean')}")
    _, _, _, bad = diag_case(tmp, causeway, "diag-wrong", 1234)
    expect(bad.get("diag-wrong: c1 names the hog", [None] * 4)[3] == "FAIL", "diag: wrong culprit is a FAIL")
    rows = os.path.join(tmp, "rows-compare.tsv")
    r = subprocess.run([sys.executable, ANALYZE, "--rows", rows, "compare", "--spin-db", dbp, "--spin-explain", exp, "--spin-json", tj,
                        "--blocking-db", dbp, "--blocking-explain", exp, "--blocking-json", tj], capture_output=True, text=True, timeout=120)
    expect(r.returncode == 0, f"compare ran: {r.stderr[-600:]}")
    got = {x[0]: x for x in rows_of(rows)}
    expect("sync time off-CPU 50%" in got.get("diag spin vs blocking sync: chains", ["", "", ""])[2],
           f"compare: off-CPU share of syncs: {got.get('diag spin vs blocking sync: chains')}")


# --------------------------------------------------------------------------------------------- late

def test_late(tmp, causeway):
    pid = 8181
    for label, n_malloc, complete, want in (("late-ok", 2, 0, "PASS"), ("late-missed", 1, 1, "FAIL"), ("late-said", 1, 0, "INFO")):
        dbp = os.path.join(tmp, f"{label}.db")
        db = Db(dbp)
        t = 1_700_000_300_000_000_000
        for k in ("runtime", "driver"):
            db.c.execute("INSERT INTO attachments VALUES (1, ?, ?, ?, 'loaded', ?, ?, '[]', '[]', '')", (pid, f"/x/lib{k}.so", k, t + 5, complete))
        for i in range(n_malloc):
            db.ev(t + 1_000_000 * (i + 1), pid, pid, 1, 1, 10_000, arg0=2 << 20)
        db.close()
        log = os.path.join(tmp, f"{label}.out")
        open(log, "w").write(f"PID {pid}\nT_IMPORT {t} {t + 1}\nT_FIRST_CUDA {t + 500_000} {t + 600_000}\nSEGMENTS 2\nDONE\n")
        rows = os.path.join(tmp, f"rows-{label}.tsv")
        r = subprocess.run([sys.executable, ANALYZE, "--rows", rows, "late", "--db", dbp, "--program-log", log],
                           capture_output=True, text=True, timeout=120)
        expect(r.returncode == 0, f"late {label} ran: {r.stderr[-600:]}")
        got = {x[0]: x for x in rows_of(rows)}
        expect(got.get("late attach: attachments table", [None] * 4)[3] == "PASS", f"late {label}: attachments PASS")
        expect(got.get("late attach: first cudaMalloc recorded", [None] * 4)[3] == want,
               f"late {label}: first cudaMalloc {want}: {got.get('late attach: first cudaMalloc recorded')}")


# ----------------------------------------------------------------------------- train.py's profile parse

def test_profile_parse(tmp):
    sys.path.insert(0, HERE)
    import train  # stdlib-only at import time; torch is imported in main()

    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "cw_window", "ts": 1000.0, "dur": 500.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 990.0, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1010.0, "dur": 5, "args": {"correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel_v7000", "ts": 1020.0, "dur": 5, "args": {"correlation": 3}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx_ptsz", "ts": 1030.0, "dur": 5, "args": {"correlation": 4}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1040.0, "dur": 5, "args": {"correlation": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1600.0, "dur": 5, "args": {"correlation": 6}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::elementwise_kernel<128>", "ts": 1100.0, "dur": 1, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_0", "ts": 1100.0, "dur": 1, "args": {"correlation": 3}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "ts": 1100.0, "dur": 1, "args": {"correlation": 4}},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "ts": 1100.0, "dur": 1, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "cutlass::device_kernel<flash::FlashAttnFwdSm90>", "ts": 1100.0, "dur": 1, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "late", "ts": 1700.0, "dur": 1, "args": {"correlation": 6}},
    ]
    path = os.path.join(tmp, "prof.json")
    json.dump({"traceEvents": ev}, open(path, "w"))
    p = train.parse_profile(path)
    expect(p["api"] == {"cudaLaunchKernel": 2, "cuLaunchKernelEx": 1, "cudaGraphLaunch": 1}, f"profile api counts: {p['api']}")
    k = p["kernels"]
    expect(k["total"] == 5 and k["uncorrelated"] == 1, f"profile kernels: {k}")
    expect(k["by_family"] == {"other": 1, "triton": 1, "nvjet": 1, "sm90_xmma": 1, "cutlass": 1}, f"profile families: {k['by_family']}")
    expect(k["by_launcher"] == {"cudaLaunchKernel": 2, "cuLaunchKernelEx": 1, "cudaGraphLaunch": 2}, f"profile launchers: {k['by_launcher']}")


def main():
    tmp = tempfile.mkdtemp(prefix="gpu-check-selftest-")
    # A stand-in `causeway query --db X --json [--limit N] [--timeout T] SQL` over sqlite3.
    causeway = os.path.join(tmp, "causeway")
    with open(causeway, "w") as f:
        f.write(f"""#!{sys.executable}
import json, sys
sys.path = [p for p in sys.path if "nosqlite" not in p]
import sqlite3
a = sys.argv[1:]
assert a[0] == "query", a
db = a[a.index("--db") + 1]
sql = a[-1]
c = sqlite3.connect(db)
cur = c.execute(sql)
print(json.dumps({{"columns": [d[0] for d in cur.description], "rows": [list(r) for r in cur.fetchall()], "truncated": False}}))
""")
    os.chmod(causeway, 0o755)
    # A sqlite3 module that fails to import, to force analyze.py onto `causeway query`.
    os.makedirs(os.path.join(tmp, "nosqlite"), exist_ok=True)
    open(os.path.join(tmp, "nosqlite", "sqlite3.py"), "w").write("raise ImportError('hidden by the selftest')\n")
    test_counts(tmp, causeway)
    test_train(tmp, causeway)
    test_diag(tmp, causeway)
    test_late(tmp, causeway)
    test_profile_parse(tmp)
    sys.path.insert(0, HERE)
    import timeline_selftest  # the `timeline` step's checks (timeline_check.py), in a file of their own

    timeline_selftest.run(tmp, causeway, Db, expect, rows_of)
    if FAILURES:
        print(f"selftest: {len(FAILURES)} failed, {PASSED[0]} passed (files in {tmp})")
        sys.exit(1)
    print(f"selftest: {PASSED[0]} checks passed")


if __name__ == "__main__":
    main()
