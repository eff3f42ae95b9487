#!/usr/bin/env python3
"""Checks of the device's own timeline (`causeway trace --gpu-timeline`) on a real GPU, for the
`timeline` step of Causeway's acceptance run (scripts/gpu-check.sh); self-tested without a GPU by
scripts/gpu-check/selftest.py.

Each subcommand appends rows to --rows as `check<TAB>expected<TAB>got<TAB>PASS|FAIL|INFO` (INFO rows are
measurements that gate nothing) and prints them. Only the standard library is used; the trace is
read-only through Python's sqlite3 (through `causeway query --json` when that module is missing).

  check     timeline.cu's trace: every kernel in gpu_ops once, tied to its launch call; CUPTI's
            durations and starts against the kernels' own %globaltimer (the CSV the program wrote);
            the two planted idle gaps (a nanosleep, a SCHED_FIFO hog named backup-rsync) as
            `explain --json` reports them: their size, their step, their largest cause; every idle
            chain's SQL recomputing its figure
  overhead  medians of runs in three modes (untraced, traced, traced with --gpu-timeline) and their
            ratios
  profiler  train.py's torch.profiler window inside a --gpu-timeline trace: the profiler still got
            its kernels; where the device view stopped, stepped aside or resumed
  count     one line, no row: the kernels a trace's device view holds and the records it lost
"""

import argparse
import csv
import json
import os
import re
import subprocess
import sys

MS = 1_000_000


class Rows:
    def __init__(self, path, label):
        self.path, self.label = path, label

    def add(self, check, expected, got, status):
        if status in (True, False):
            status = "PASS" if status else "FAIL"
        clean = [re.sub(r"[\t\r\n]+", " ", str(x)).strip() for x in (f"{self.label}: {check}", expected, got, status)]
        print(f"  [{clean[3]}] {clean[0]}: expected {clean[1]}, got {clean[2]}", flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write("\t".join(clean) + "\n")


class Trace:
    """A trace opened read-only; `q` runs one SELECT and returns tuples."""

    def __init__(self, path, causeway=None):
        self.path, self.cw, self.conn = path, causeway, None
        if not os.path.exists(path):
            raise RuntimeError(f"no trace at {path}")
        try:
            import sqlite3

            self.conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=30)
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except ImportError:
            self.conn = None

    def q(self, sql):
        if self.conn is not None:
            return [tuple(r) for r in self.conn.execute(sql).fetchall()]
        if not self.cw:
            raise RuntimeError("no sqlite3 module and no causeway binary to query with")
        r = subprocess.run([self.cw, "query", "--db", self.path, "--json", "--limit", "1000000", "--timeout", "120s", sql],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-400:])
        return [tuple(x) for x in json.loads(r.stdout)["rows"]]

    def value(self, sql):
        """The `value` column (else the first) of the first row."""
        if self.conn is not None:
            cur = self.conn.execute(sql)
            names = [d[0] for d in cur.description or []]
            row = cur.fetchone()
            if row is None:
                return None
            return row[names.index("value")] if "value" in names else row[0]
        rows = self.q(sql)
        return rows[0][0] if rows else None


def nearest_rank(sorted_xs, p):
    """Exact nearest-rank percentile of an ascending list (p in 0..100)."""
    if not sorted_xs:
        return None
    k = max(1, -(-len(sorted_xs) * p // 100))
    return sorted_xs[min(len(sorted_xs), int(k)) - 1]


def median(xs):
    s = sorted(xs)
    n = len(s)
    if not n:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def us(ns):
    return f"{ns / 1000:.1f} us"


def ms(ns):
    return f"{ns / MS:.3f} ms"


def load_explain(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except Exception as e:  # noqa: BLE001 - said in the rows
        return None, f"{type(e).__name__}: {e}"


def read_csv(path):
    """[(step, start_ns, end_ns)] of the kernels that ran (start 0: never written)."""
    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            s, e = int(r["start_ns"]), int(r["end_ns"])
            if s > 0 and e >= s:
                out.append((int(r["step"]), s, e))
    out.sort()
    return out


# ------------------------------------------------------------------------------------------- check

def find_gap(gaps, step, kernels):
    """The listed gap that began in `step`; else the one that ended at the step's kernel (by order)
    and a word saying it was found that way."""
    for g in gaps:
        if g.get("step") == step:
            return g, ""
    if 0 <= step < len(kernels):
        start = kernels[step][0]
        for g in gaps:
            if abs(int(g.get("end_ns", -1)) - start) <= 1000:
                return g, " (found by kernel order: the gap has no step)"
    return None, ""


def part_text(p):
    if not p:
        return "no part"
    cul = p.get("culprit") or {}
    who = f" by {cul.get('comm')} (pid {cul.get('pid')})" if cul else ""
    return f"{p.get('cause')}{who} {ms(int(p.get('ns', 0)))}"


def cmd_check(a, rows):
    try:
        tr = Trace(a.db, a.causeway)
        ks = tr.q("SELECT start_ns, end_ns, launch_event_id, launch_tid, correlation, name FROM gpu_ops WHERE kind = 1 "
                  "ORDER BY start_ns, end_ns, correlation")
    except Exception as e:  # noqa: BLE001
        rows.add("trace readable (gpu_ops)", "a trace with the device tables", f"{type(e).__name__}: {e}", "FAIL")
        return

    # Every kernel once, tied to the call that launched it.
    n = len(ks)
    rows.add("kernels in gpu_ops (kind 1)", f"{a.steps} (one per step)", f"{n} ({len({k[4] for k in ks})} correlation ids; "
             f"{', '.join(sorted({k[5][:40] for k in ks})) or 'no name'})", n == a.steps)
    linked = sum(1 for k in ks if k[2] != 0)
    same = tr.q("SELECT count(*) FROM gpu_ops g JOIN events e ON e.id = g.launch_event_id WHERE g.kind = 1 "
                "AND e.tid = g.launch_tid AND e.timestamp <= g.start_ns")[0][0]
    rows.add("kernels tied to their launch call", f"all {n} (launch_event_id <> 0)",
             f"{linked} of {n} ({same} of them a call of the launching thread that began before the kernel)",
             n > 0 and linked == n)

    # CUPTI against the kernels' own clock, joined by order.
    try:
        gt = read_csv(a.csv)
    except Exception as e:  # noqa: BLE001
        gt = None
        rows.add("globaltimer CSV", "step,start_ns,end_ns per step", f"unreadable: {type(e).__name__}: {e}", "FAIL")
    if gt is not None:
        m = min(len(gt), n)
        note = "" if len(gt) == n else f" (CSV {len(gt)} kernels, gpu_ops {n}: the first {m} joined by order)"
        if m == 0:
            rows.add("kernel duration |CUPTI - globaltimer|", "kernels to compare", f"none{note}", "FAIL")
        else:
            cdur = [ks[i][1] - ks[i][0] for i in range(m)]
            gdur = [gt[i][2] - gt[i][1] for i in range(m)]
            dd = sorted(abs(c - g) for c, g in zip(cdur, gdur))
            p50, p99, mx = nearest_rank(dd, 50), nearest_rank(dd, 99), dd[-1]
            rows.add("kernel duration |CUPTI - globaltimer|", "a few us",
                     f"p50 {us(p50)}, p99 {us(p99)}, max {us(mx)} over {m} kernels (median duration: CUPTI "
                     f"{us(median(cdur))}, globaltimer {us(median(gdur))}){note}", "INFO")
            rows.add("kernel duration difference p99", f"< {a.max_dur_diff_us:g} us", us(p99),
                     p99 < a.max_dur_diff_us * 1000)
            off = [ks[i][0] - gt[i][1] for i in range(m)]
            med = sorted(off)[m // 2]  # an integer: both clocks count ns since an epoch, floats would round
            resid = [o - med for o in off]
            slope = drift_ppm([gt[i][1] for i in range(m)], off)
            rows.add("start offset, CUPTI - globaltimer", "a constant offset (CUPTI in the trace clock)",
                     f"spread (max - min) {us(max(resid) - min(resid))} (median removed: {us(min(resid))} .. "
                     f"+{us(max(resid))}; p99 |dev| {us(nearest_rank(sorted(abs(d) for d in resid), 99))}); "
                     f"drift {slope:+.2f} ppm; "
                     f"median offset {med / MS:.3f} ms{note}", "INFO")
    try:
        s = tr.q("SELECT count(*), max(error_ns), min(error_ns) FROM gpu_clock_syncs")[0]
        errs = sorted(r[0] for r in tr.q("SELECT error_ns FROM gpu_clock_syncs"))
        got = (f"{s[0]} calibrations; error bound max {s[1]} ns, median {median(errs):.0f} ns, min {s[2]} ns"
               if errs else "no calibration")
        rows.add("gpu_clock_syncs.error_ns", "bounded (info)", got, "INFO")
    except Exception as e:  # noqa: BLE001
        rows.add("gpu_clock_syncs.error_ns", "bounded (info)", f"{type(e).__name__}: {e}", "INFO")
    started = notes_of(tr)
    rows.add("injection library's notes", "started: CUPTI ...", "; ".join(started) or "no note", "INFO")

    # The planted gaps, as explain reports them.
    ex, err = load_explain(a.explain)
    dev = (ex or {}).get("device") if ex else None
    if not dev:
        why = err or f"no device view; missing: {'; '.join((ex or {}).get('missing', []))[:300]}"
        for what in (f"gap at step {a.sleep_at}", f"gap at step {a.hog_at}", "idle chains' SQL"):
            rows.add(what, "from explain --json", why, "FAIL")
        return
    kinfo = [(k[0], k[1]) for k in ks]
    gaps = dev.get("gaps") or []
    tol = a.tolerance_ms * MS
    placed = []
    for step, what, want_cause in ((a.sleep_at, f"nanosleep {a.stall_ms:g} ms", "sleep"),
                                   (a.hog_at, f"{a.hog_name} {a.stall_ms:g} ms", "preempted")):
        g, how = find_gap(gaps, step, kinfo)
        if g is None:
            listed = ", ".join(f"{ms(int(x['idle_ns']))} at step {x.get('step')}" for x in gaps[:6]) or "none"
            rows.add(f"gap at step {step} ({what})", f"GPU idle {a.stall_ms:g} ms +- {a.tolerance_ms:g} ms",
                     f"no gap at step {step} (listed: {listed})", "FAIL")
            rows.add(f"gap at step {step}: largest part", want_cause, "no gap", "FAIL")
            continue
        if g.get("step") == step:
            placed.append(step)
        idle = int(g.get("idle_ns", 0))
        parts = ", ".join(part_text(p) for p in (g.get("parts") or [])[:4])
        rows.add(f"gap at step {step} ({what})", f"GPU idle {a.stall_ms:g} ms +- {a.tolerance_ms:g} ms",
                 f"{ms(idle)}{how} (parts: {parts})", abs(idle - a.stall_ms * MS) <= tol)
        top = (g.get("parts") or [None])[0]
        if want_cause == "sleep":
            ok = bool(top) and top.get("cause") == "sleep"
            exp = "sleep"
        else:
            ok = bool(top) and top.get("cause") == "preempted" and (top.get("culprit") or {}).get("comm") == a.hog_name
            exp = f"preempted by {a.hog_name}"
        rows.add(f"gap at step {step}: largest part", exp, f"{part_text(top)}: {g.get('summary', '')[:200]}", ok)
    rows.add("planted gaps placed in their steps", f"steps {a.sleep_at} and {a.hog_at} (step labels)",
             f"placed: {', '.join(map(str, placed)) or 'none'}", len(placed) == 2)

    chains = dev.get("chains") or []
    good, bad = 0, []
    for c in chains:
        try:
            v = tr.value(c["sql"])
        except Exception as e:  # noqa: BLE001
            v = f"{type(e).__name__}: {e}"
        if isinstance(v, (int, float)) and abs(int(v) - int(c.get("idle_ns", -1))) <= 1:
            good += 1
        else:
            bad.append(f"{c.get('id')} {c.get('cause')}: {c.get('idle_ns')} vs {str(v)[:120]}")
    rows.add("idle chains' SQL recomputes idle_ns", f"all {len(chains)} chains (> 0)",
             f"{good} of {len(chains)} equal" + (f"; {'; '.join(bad[:2])}" if bad else ""), bool(chains) and not bad)

    devs = dev.get("devices") or []
    busy = "; ".join(f"GPU {d.get('device')} {d.get('name', '')}: busy {100 * d.get('busy_share', 0):.1f}% of "
                     f"{ms(d.get('last_ns', 0) - d.get('first_ns', 0))}, {d.get('ops')} ops, idle {ms(d.get('idle_ns', 0))} "
                     f"({ms(d.get('idle_in_short_gaps_ns', 0))} in short gaps)" for d in devs)
    top_chains = ", ".join(f"{c.get('id')} {c.get('cause')} {ms(c.get('idle_ns', 0))}" for c in chains[:4])
    rows.add("device view", "busy share and gaps (info)",
             f"{busy or 'no device'}; {dev.get('gaps_total')} gaps >= {ms(dev.get('gap_threshold_ns', 0))}: "
             f"{ms(dev.get('gaps_idle_ns', 0))}; clock error bound {us(dev.get('clock_error_ns', 0))}; "
             f"chains: {top_chains or 'none'}", "INFO")
    if dev.get("notes"):
        rows.add("device view notes (explain)", "none expected (info)", " | ".join(dev["notes"])[:600], "INFO")


def drift_ppm(xs, ys):
    """The least-squares slope of ys over xs, in parts per million."""
    n = len(xs)
    if n < 2:
        return 0.0
    xs, ys = [x - xs[0] for x in xs], [y - ys[0] for y in ys]  # small numbers before any float
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx * 1e6


def notes_of(tr, t0=None):
    """The injection library's notes (gpu_timeline_notes) as `kind[ xN]: detail [at +ms]`."""
    try:
        rs = tr.q("SELECT ts_ns, kind, count, detail FROM gpu_timeline_notes ORDER BY ts_ns, kind")
    except Exception as e:  # noqa: BLE001
        return [f"gpu_timeline_notes unreadable: {e}"]
    out = []
    for ts, kind, count, detail in rs:
        at = f" at {(ts - t0) / MS:+.1f} ms from the profiled window's start" if t0 else ""
        out.append(f"{kind}{f' x{count}' if count else ''}: {detail[:240]}{at}")
    return out


# ---------------------------------------------------------------------------------------- overhead

def cmd_overhead(a, rows):
    modes = (("untraced", a.untraced), ("traced", a.traced), ("timeline", a.timeline))
    what = {"untraced": "no tracer", "traced": "causeway trace --nvml-hz 0",
            "timeline": "causeway trace --nvml-hz 0 --gpu-timeline"}
    med = {}
    for name, xs in modes:
        if xs:
            med[name] = median(xs)
            rows.add(name, f"{a.unit}, {what[name]} (info)", f"{med[name]:g} (median of {', '.join(f'{x:g}' for x in xs)})", "INFO")
        else:
            rows.add(name, f"{a.unit}, {what[name]} (info)", "no run", "INFO")
    for num, den, cost in (("traced", "untraced", "the host trace's cost"),
                           ("timeline", "untraced", "the whole cost"),
                           ("timeline", "traced", "the device timeline's own cost")):
        if num in med and den in med and med[den]:
            rows.add(f"{num}/{den}", f"1.0 = no cost ({cost})",
                     f"{med[num]:g} / {med[den]:g} = {med[num] / med[den]:.3f}", "INFO")


# ---------------------------------------------------------------------------------------- profiler

def cmd_profiler(a, rows):
    try:
        with open(a.json) as f:
            res = json.load(f)
        ph = (res.get("phases") or [{}])[0]
    except Exception as e:  # noqa: BLE001
        rows.add("torch.profiler kernels", "> 0, under --gpu-timeline", f"no results: {type(e).__name__}: {e}", "FAIL")
        return
    prof = ph.get("profile") or {}
    total = (prof.get("kernels") or {}).get("total")
    if ph.get("error") or total is None:
        rows.add("torch.profiler kernels", "> 0, under --gpu-timeline",
                 f"no profile: {ph.get('error') or prof.get('error') or 'none'}", "FAIL")
    else:
        api = prof.get("api") or {}
        launches = sum(v for k, v in api.items() if "Launch" in k)
        rows.add("torch.profiler kernels", "> 0, under --gpu-timeline",
                 f"{total} kernels, {launches} launch calls in its {prof.get('steps')} steps", total > 0)
    t0, t1 = prof.get("t0_ns"), prof.get("t1_ns")
    try:
        tr = Trace(a.db, a.causeway)
        if t0 and t1:
            b, i, after = tr.q(f"SELECT sum(start_ns < {t0}), sum(start_ns >= {t0} AND start_ns <= {t1}), sum(start_ns > {t1}) "
                               "FROM gpu_ops WHERE kind = 1")[0]
            got = f"{(b or 0) + (i or 0) + (after or 0)} kernels: {b or 0} before the profiled window, {i or 0} in it, {after or 0} after"
        else:
            got = f"{tr.q('SELECT count(*) FROM gpu_ops WHERE kind = 1')[0][0]} kernels (no window times)"
        rows.add("device view kernels (gpu_ops)", "info: the view steps aside for the profiler", got, "INFO")
        notes = notes_of(tr, t0)
    except Exception as e:  # noqa: BLE001
        rows.add("device view kernels (gpu_ops)", "info", f"{type(e).__name__}: {e}", "INFO")
        notes = []
    ex, err = load_explain(a.explain) if a.explain else (None, "no explain")
    dnotes = ((ex or {}).get("device") or {}).get("notes") or []
    text = " | ".join([n for n in notes if not n.startswith("started")] + [f"explain: {n}" for n in dnotes])
    rows.add("where the view stepped aside", "a note: where the device view stopped or stepped aside (info)",
             text[:900] or f"NO NOTE in gpu_timeline_notes nor explain{f' ({err})' if err else ''}", "INFO")


# ------------------------------------------------------------------------------------------- count

def cmd_count(a, _rows):
    tr = Trace(a.db, a.causeway)
    n, linked = tr.q("SELECT count(*), coalesce(sum(launch_event_id <> 0), 0) FROM gpu_ops WHERE kind = 1")[0]
    lost = tr.q("SELECT kind, coalesce(sum(count), 0) FROM gpu_timeline_notes WHERE kind IN ('dropped', 'zero_timestamps', 'off') "
                "GROUP BY kind ORDER BY kind")
    said = ", ".join(f"{k} {c}" for k, c in lost) or "no loss noted"
    print(f"{n} kernels stored ({linked} tied to their launch); {said}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", help="append result rows here")
    ap.add_argument("--causeway", help="the causeway binary (queries when Python has no sqlite3)")
    ap.add_argument("--label", default="timeline", help="prefix of every row's check")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("--db", required=True)
    c.add_argument("--explain", required=True, help="causeway explain --json of the trace")
    c.add_argument("--csv", required=True, help="the program's globaltimer CSV")
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--sleep-at", type=int, default=300)
    c.add_argument("--hog-at", type=int, default=600)
    c.add_argument("--stall-ms", type=float, default=38)
    c.add_argument("--hog-name", default="backup-rsync")
    c.add_argument("--tolerance-ms", type=float, default=1.0)
    c.add_argument("--max-dur-diff-us", type=float, default=50.0)
    o = sub.add_parser("overhead")
    o.add_argument("--unit", default="runs/s")
    for m in ("untraced", "traced", "timeline"):
        o.add_argument(f"--{m}", type=float, nargs="*", default=[])
    p = sub.add_parser("profiler")
    p.add_argument("--db", required=True)
    p.add_argument("--json", required=True, help="train.py's results")
    p.add_argument("--explain", help="causeway explain --json of the trace")
    n = sub.add_parser("count")
    n.add_argument("--db", required=True)
    a = ap.parse_args()
    rows = Rows(a.rows, a.label)
    if a.cmd == "count":
        try:
            cmd_count(a, rows)
        except Exception as e:  # noqa: BLE001 - one line either way
            print(f"unreadable: {type(e).__name__}: {e}")
        return 0
    try:
        {"check": cmd_check, "overhead": cmd_overhead, "profiler": cmd_profiler}[a.cmd](a, rows)
    except Exception as e:  # noqa: BLE001 - a broken check is a FAIL row, not a lost step
        rows.add(f"{a.cmd} ran", "no error", f"{type(e).__name__}: {e}", "FAIL")
        raise


if __name__ == "__main__":
    sys.exit(main())
