# Self-test of timeline_check.py (the `timeline` step of scripts/gpu-check.sh) without a GPU: a synthetic
# trace with the device tables this repository writes (gpu_ops, gpu_clock_syncs, gpu_timeline_notes and
# the launch calls in events, from backends/src/schema.rs through selftest.py's Db), a synthetic
# `explain --json` and the program's globaltimer CSV. A clean trace (planted gaps of 38 ms) gives no
# FAIL; a bad one (a 45 ms gap, a kernel without its launch call, durations 80 us off, a chain whose
# SQL disagrees, a gap without its step) gives exactly the FAILs it should. Run by selftest.py.

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "timeline_check.py")
MS = 1_000_000
STEPS, SLEEP_AT, HOG_AT = 40, 10, 25


def build(tmp, name, Db, bad=False):
    """The trace, its explain JSON and the CSV; (db, explain, csv)."""
    pid = tid = 9191
    hog = 9292
    dbp = os.path.join(tmp, f"{name}.db")
    db = Db(dbp)
    t = 1_700_000_400_000_000_000
    offset = 5_000_000  # globaltimer = CUPTI (trace clock) - offset, + a small jitter
    kernels = []
    for s in range(STEPS):
        stall = 0
        if s == SLEEP_AT:
            stall = 38 * MS
        if s == HOG_AT:
            stall = (45 if bad else 38) * MS
        t += 150_000 + stall
        launch_id = db.next_id
        db.ev(t, pid, tid, 1, 3, 8_000, arg0=0x1000)  # cudaLaunchKernel
        start = t + 20_000
        end = start + 1_000_000
        kernels.append((start, end))
        lid = 0 if (bad and s == 3) else launch_id
        db.c.execute("INSERT INTO gpu_ops (pid, device, context, stream, kind, start_ns, end_ns, correlation, name, "
                     "launch_tid, launch_start_ns, launch_end_ns, launch_cbid, launch_event_id) "
                     "VALUES (?, 0, 1, 13, 1, ?, ?, ?, '_Z7tl_stepPyiy', ?, ?, ?, 211, ?)",
                     (pid, start, end, s + 1, tid, t, t + 8_000, lid))
        t = end
        db.ev(t - 900_000, pid, tid, 1, 5, 950_000)  # cudaStreamSynchronize
    for i in range(3):
        db.c.execute("INSERT INTO gpu_clock_syncs VALUES (?, ?, ?, ?)", (pid, 1000 + i, kernels[0][0] + i * MS, 150 + i * 10))
    db.c.execute("INSERT INTO gpu_timeline_notes VALUES (?, ?, 'started', 0, 'CUPTI 13.0 (libcupti.so.13): recording kernels')",
                 (pid, kernels[0][0] - MS))
    db.close()

    csvp = os.path.join(tmp, f"{name}.csv")
    with open(csvp, "w") as f:
        f.write("step,start_ns,end_ns\n")
        for s, (a, b) in enumerate(kernels):
            j = (s * 37) % 7 * 100  # 0 .. 600 ns
            long = 80_000 if (bad and s % 10 == 0) else 0  # 4 of 40 kernels 80 us longer by the GPU's clock
            f.write(f"{s},{a - offset + j},{b - offset + j + long}\n")

    def gap(step, culprit, cause, step_known=True):
        a, b = kernels[step - 1][1], kernels[step][0]
        parts = [{"cause": cause, "ns": b - a - 190_000, "start_ns": a, "end_ns": b - 190_000},
                 {"cause": "host_compute", "ns": 170_000, "start_ns": b - 190_000, "end_ns": b - 20_000},
                 {"cause": "launch_overhead", "ns": 20_000, "start_ns": b - 20_000, "end_ns": b}]
        if culprit:
            parts[0]["culprit"] = {"pid": hog, "tid": hog, "comm": culprit, "role": "took_cpu"}
        g = {"pid": pid, "device": 0, "start_ns": a, "end_ns": b, "idle_ns": b - a, "parts": parts,
             "next": {"kind": "kernel", "name": "_Z7tl_stepPyiy", "stream": 13, "correlation": step + 1, "launch_tid": tid,
                      "launch_thread": "timeline", "launch_start_ns": b - 20_000, "launch_event_id": 1},
             "summary": f"the GPU (device 0) sat idle {(b - a) / MS:.2f} ms at step {step}: ..."}
        if step_known:
            g["step"] = step
        return g

    gaps = [gap(HOG_AT, "backup-rsync", "preempted"), gap(SLEEP_AT, None, "sleep", step_known=not bad)]
    gsql = ("SELECT (SELECT start_ns FROM gpu_ops WHERE kind = 1 AND correlation = {c}) - "
            "(SELECT end_ns FROM gpu_ops WHERE kind = 1 AND correlation = {p}) - 190000 AS value")
    chains = [{"id": "g1", "cause": "preempted", "idle_ns": gaps[0]["parts"][0]["ns"], "gaps": 1, "share": 0.5, "summary": "",
               "culprit": gaps[0]["parts"][0]["culprit"], "sql": gsql.format(c=HOG_AT + 1, p=HOG_AT)},
              {"id": "g2", "cause": "sleep", "idle_ns": gaps[1]["parts"][0]["ns"] + (7 if bad else 0), "gaps": 1, "share": 0.5,
               "summary": "", "sql": gsql.format(c=SLEEP_AT + 1, p=SLEEP_AT)}]
    ex = {"verdict": "The GPU was busy ...", "chains": [], "device": {
        "devices": [{"pid": pid, "device": 0, "name": "NVIDIA H100", "first_ns": kernels[0][0], "last_ns": kernels[-1][1],
                     "ops": STEPS, "busy_ns": STEPS * MS, "idle_ns": 90 * MS, "busy_share": 0.3, "idle_in_short_gaps_ns": 6 * MS,
                     "streams": []}],
        "gap_threshold_ns": MS, "gaps_total": 2, "gaps_idle_ns": 80 * MS, "gaps": gaps, "chains": chains,
        "host_time_hidden_ns": 0, "clock_error_ns": 170, "notes": []}}
    exp = os.path.join(tmp, f"{name}.explain.json")
    with open(exp, "w") as f:
        json.dump(ex, f)
    return dbp, exp, csvp


def check(tmp, name, dbp, exp, csvp, causeway=None, env=None):
    rows = os.path.join(tmp, f"rows-{name}.tsv")
    cmd = [sys.executable, CHECK, "--rows", rows] + (["--causeway", causeway] if causeway else []) + [
        "check", "--db", dbp, "--explain", exp, "--csv", csvp, "--steps", str(STEPS), "--sleep-at", str(SLEEP_AT),
        "--hog-at", str(HOG_AT)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    return r, rows


def run(tmp, causeway, Db, expect, rows_of):
    """The timeline cases; `expect(cond, what)` counts, `rows_of(path)` reads a rows file."""
    status = lambda rows, check: {x[0]: x for x in rows_of(rows)}.get(f"timeline: {check}", [None] * 4)[3]  # noqa: E731

    dbp, exp, csvp = build(tmp, "timeline-ok", Db)
    for how in ("sqlite3", "causeway query"):
        env = dict(os.environ)
        if how != "sqlite3":
            env["PYTHONPATH"] = os.path.join(tmp, "nosqlite")
        r, rows = check(tmp, f"timeline-ok-{how[:3]}", dbp, exp, csvp, causeway, env)
        expect(r.returncode == 0, f"timeline check ({how}) ran: {r.stderr[-600:]}")
        bad = [x for x in rows_of(rows) if x[3] == "FAIL"]
        expect(not bad, f"timeline ({how}): clean trace has no FAIL: {bad}")
        for c in ("kernels in gpu_ops (kind 1)", "kernels tied to their launch call",
                  "kernel duration difference p99", f"gap at step {SLEEP_AT} (nanosleep 38 ms)",
                  f"gap at step {SLEEP_AT}: largest part", f"gap at step {HOG_AT} (backup-rsync 38 ms)",
                  f"gap at step {HOG_AT}: largest part", "planted gaps placed in their steps",
                  "idle chains' SQL recomputes idle_ns"):
            expect(status(rows, c) == "PASS", f"timeline ({how}): {c} PASS: {status(rows, c)}")
        got = {x[0]: x for x in rows_of(rows)}
        clock = got.get("timeline: start offset, CUPTI - globaltimer", ["", "", ""])[2]
        expect("spread (max - min) 0.6 us" in clock and "median offset 5.000 ms" in clock, f"timeline: start offset spread: {clock}")
        syncs = got.get("timeline: gpu_clock_syncs.error_ns", ["", "", ""])[2]
        expect("3 calibrations; error bound max 170 ns" in syncs, f"timeline: clock syncs: {syncs}")
        expect("started: CUPTI 13.0" in got.get("timeline: injection library's notes", ["", "", ""])[2], "timeline: started note")

    dbp, exp, csvp = build(tmp, "timeline-bad", Db, bad=True)
    r, rows = check(tmp, "timeline-bad", dbp, exp, csvp)
    expect(r.returncode == 0, f"timeline bad check ran: {r.stderr[-600:]}")
    fails = {x[0] for x in rows_of(rows) if x[3] == "FAIL"}
    want = {f"timeline: gap at step {HOG_AT} (backup-rsync 38 ms)", "timeline: kernels tied to their launch call",
            "timeline: kernel duration difference p99", "timeline: idle chains' SQL recomputes idle_ns",
            "timeline: planted gaps placed in their steps"}
    expect(fails == want, f"timeline bad: the FAILs it should ({sorted(want)}): {sorted(fails)}")
    got = {x[0]: x for x in rows_of(rows)}
    g = got.get(f"timeline: gap at step {HOG_AT} (backup-rsync 38 ms)", ["", "", ""])[2]
    expect(g.startswith("45.170 ms"), f"timeline bad: the 45 ms gap (and the step's host work) reported: {g}")
    g = got.get(f"timeline: gap at step {SLEEP_AT} (nanosleep 38 ms)", ["", "", "", ""])
    expect(g[3] == "PASS" and "found by kernel order" in g[2], f"timeline bad: a gap without its step found by order: {g}")

    # count: one line about the device view of a trace.
    r = subprocess.run([sys.executable, CHECK, "count", "--db", dbp], capture_output=True, text=True, timeout=60)
    expect(r.stdout.strip() == f"{STEPS} kernels stored ({STEPS - 1} tied to their launch); no loss noted", f"count: {r.stdout!r}")

    # A missing explain: the gap rows FAIL, the rest still runs.
    r, rows = check(tmp, "timeline-noexplain", dbp, os.path.join(tmp, "none.json"), csvp)
    expect(status(rows, f"gap at step {SLEEP_AT}") == "FAIL", "timeline: no explain is a FAIL")
    expect(status(rows, "kernels in gpu_ops (kind 1)") == "PASS", "timeline: no explain: the kernel rows still run")

    # Overhead: medians and ratios of three modes.
    rows = os.path.join(tmp, "rows-timeline-overhead.tsv")
    subprocess.run([sys.executable, CHECK, "--rows", rows, "--label", "tl empty launches/s", "overhead", "--unit", "launches/s",
                    "--untraced", "400000", "380000", "--traced", "200000", "220000", "--timeline", "150000", "160000", "170000"],
                   capture_output=True, text=True, timeout=60)
    got = {x[0]: x for x in rows_of(rows)}
    expect(got.get("tl empty launches/s: untraced", ["", "", ""])[2].startswith("390000 (median of 400000, 380000)"),
           f"overhead median: {got.get('tl empty launches/s: untraced')}")
    expect(got.get("tl empty launches/s: timeline/traced", ["", "", ""])[2] == "160000 / 210000 = 0.762",
           f"overhead ratio: {got.get('tl empty launches/s: timeline/traced')}")
    expect(all(x[3] == "INFO" for x in rows_of(rows)) and len(rows_of(rows)) == 6, f"overhead: 6 INFO rows: {rows_of(rows)}")

    # The profiler inside a --gpu-timeline trace.
    prof_db = dbp
    base = 1_700_000_400_000_000_000
    for label, total, want_st in (("prof-ok", 57, "PASS"), ("prof-none", 0, "FAIL")):
        j = os.path.join(tmp, f"{label}.json")
        with open(j, "w") as f:
            json.dump({"phases": [{"name": "eager", "profile": {"t0_ns": base + 100 * MS, "t1_ns": base + 200 * MS, "steps": 10,
                                                                  "api": {"cudaLaunchKernel": 40, "cuLaunchKernelEx": 17},
                                                                  "kernels": {"total": total}}}]}, f)
        rows = os.path.join(tmp, f"rows-{label}.tsv")
        r = subprocess.run([sys.executable, CHECK, "--rows", rows, "--label", "timeline profiler", "profiler", "--db", prof_db,
                            "--json", j, "--explain", exp], capture_output=True, text=True, timeout=60)
        expect(r.returncode == 0, f"profiler {label} ran: {r.stderr[-600:]}")
        got = {x[0]: x for x in rows_of(rows)}
        k = got.get("timeline profiler: torch.profiler kernels", [None] * 4)
        expect(k[3] == want_st and k[2].startswith(f"{total} kernels, 57 launch calls"), f"profiler {label}: {k}")
        v = got.get("timeline profiler: device view kernels (gpu_ops)", ["", "", ""])[2]
        expect(v.startswith(f"{STEPS} kernels: "), f"profiler {label}: kernels by window: {v}")
        n = got.get("timeline profiler: where the view stepped aside", [None] * 4)
        expect(n[3] == "INFO" and n[2].startswith("NO NOTE"), f"profiler {label}: no stepped-aside note said: {n}")
