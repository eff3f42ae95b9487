#!/usr/bin/env python3
"""Checks of Causeway's GPU acceptance run (scripts/gpu-check.sh) over the traces it recorded.

Each subcommand reads a trace (native SQLite, read-only, through Python's sqlite3; when that module is
missing, through `causeway query --json`: the same SQL), prints a report, and appends result rows to
--rows as `check<TAB>expected<TAB>got<TAB>PASS|FAIL|INFO`. INFO rows are measurements that gate
nothing. Only the standard library is used.

  counts   exact runtime call counts of counts.cu, driver events, kernel names, launch configs,
           the nesting map (driver calls inside each runtime call on the same thread), losses
  train    launch counts per API in train.py's profiled windows vs torch.profiler (CUPTI)
  overhead steps/s traced vs untraced
  diag     the planted CPU hog: is the first chain of `causeway explain --json` the hog?
  compare  how the chains of the spin and blocking-sync diagnosis runs differ
  late     late attach: the attachments table and whether the first cudaMalloc was recorded
"""

import argparse
import json
import os
import re
import subprocess
import sys

# (source, op, arg1 filter) for the API names counts.cu prints.
API = {
    "cudaMalloc": (1, 1, None),
    "cudaFree": (1, 2, None),
    "cudaLaunchKernel": (1, 3, None),
    "cudaStreamSynchronize": (1, 5, None),
    "cudaDeviceSynchronize": (1, 6, None),
    "cudaMemcpyAsync:HostToDevice": (1, 7, 1),
    "cudaMemcpyAsync:DeviceToHost": (1, 7, 2),
    "cudaMemcpyAsync:DeviceToDevice": (1, 7, 3),
    "cudaEventSynchronize": (1, 13, None),
    "cudaLaunchKernelExC": (1, 14, None),
    "cudaMemsetAsync": (1, 15, None),
    "cudaMallocAsync": (1, 16, None),
    "cudaFreeAsync": (1, 17, None),
    "cudaHostAlloc": (1, 18, None),
    "cudaSetDevice": (1, 22, None),
    "cudaStreamBeginCapture": (8, 1, None),
    "cudaStreamEndCapture": (8, 2, None),
    "cudaGraphInstantiate": (8, 3, None),
    "cudaGraphLaunch": (8, 4, None),
}
# What the brief of the acceptance run requires to be exact; the others are reported (INFO when the
# build does not record them at all, FAIL when it records a wrong number).
REQUIRED = {
    "cudaMalloc", "cudaFree", "cudaLaunchKernel", "cudaStreamSynchronize", "cudaDeviceSynchronize",
    "cudaMemcpyAsync:HostToDevice", "cudaMemcpyAsync:DeviceToHost", "cudaMemcpyAsync:DeviceToDevice",
    "cudaEventSynchronize", "cudaLaunchKernelExC", "cudaMemsetAsync", "cudaMallocAsync", "cudaFreeAsync",
    "cudaGraphLaunch",
}
# Fallback names when a trace's `ops` lookup table cannot be read.
OP_NAMES = {
    (1, 1): "cudaMalloc", (1, 2): "cudaFree", (1, 3): "cudaLaunchKernel", (1, 4): "cudaMemcpy",
    (1, 5): "cudaStreamSync", (1, 6): "cudaDeviceSync", (1, 7): "cudaMemcpyAsync", (1, 13): "cudaEventSync",
    (1, 14): "cudaLaunchKernelExC", (1, 15): "cudaMemsetAsync", (1, 16): "cudaMallocAsync",
    (1, 17): "cudaFreeAsync", (1, 18): "cudaHostAlloc", (1, 19): "cudaEventQuery", (1, 21): "cudaSetDeviceFlags", (1, 22): "cudaSetDevice",
    (4, 1): "cuLaunchKernel", (4, 2): "cuMemcpy", (4, 3): "cuMemcpyAsync", (4, 4): "cuCtxSynchronize",
    (4, 5): "cuMemAlloc", (4, 7): "cuMemFree", (4, 8): "cuStreamSynchronize", (4, 9): "cuLaunchKernelEx",
    (4, 10): "cuMemsetAsync", (4, 15): "cuMemAllocAsync", (4, 16): "cuMemFreeAsync",
    (8, 1): "graph_begin_capture", (8, 2): "graph_end_capture", (8, 3): "graph_instantiate",
    (8, 4): "cudaGraphLaunch", (8, 5): "cuGraphLaunch",
}

# SQL predicates: runtime calls (CUDA runtime, and the runtime's graph calls) and driver calls.
RUNTIME = "({a}.source = 1 OR ({a}.source = 8 AND {a}.op <> 5))"
DRIVER = "({a}.source = 4 OR ({a}.source = 8 AND {a}.op = 5))"


def rt(a):
    return RUNTIME.format(a=a)


def drv(a):
    return DRIVER.format(a=a)


class Trace:
    """A trace opened read-only; `q` runs one SELECT and returns tuples."""

    def __init__(self, path, causeway=None):
        self.path, self.cw, self.conn = path, causeway, None
        self.how = "sqlite3"
        try:
            import sqlite3

            self.conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=30)
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except Exception as e:  # noqa: BLE001 - fall back to the tool's own query command
            self.conn = None
            self.how = f"causeway query ({type(e).__name__}: {e})"
        self._names = None

    def q(self, sql):
        if self.conn is not None:
            return [tuple(r) for r in self.conn.execute(sql).fetchall()]
        if not self.cw:
            raise RuntimeError("no sqlite3 module and no causeway binary to query with")
        r = subprocess.run([self.cw, "query", "--db", self.path, "--json", "--limit", "10000", "--timeout", "120s", sql],
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-400:])
        return [tuple(x) for x in json.loads(r.stdout)["rows"]]

    def columns(self, table):
        """The columns of `table`, or None when the trace has no such table."""
        try:
            if self.conn is not None:
                return [d[0] for d in self.conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
            r = subprocess.run([self.cw, "query", "--db", self.path, "--json", "--limit", "1", f"SELECT * FROM {table} LIMIT 1"],
                               capture_output=True, text=True, timeout=60)
            return json.loads(r.stdout)["columns"] if r.returncode == 0 else None
        except Exception:  # noqa: BLE001
            return None

    def op_name(self, source, op):
        if self._names is None:
            self._names = dict(OP_NAMES)
            try:
                for s, o, n in self.q("SELECT source_id, op_id, name FROM ops"):
                    self._names[(s, o)] = n
            except Exception:  # noqa: BLE001
                pass
        return self._names.get((source, op), f"op_{source}_{op}")


class Rows:
    def __init__(self, path):
        self.path = path

    def add(self, check, expected, got, status):
        clean = [re.sub(r"[\t\r\n]+", " ", str(x)).strip() for x in (check, expected, got, status)]
        line = "\t".join(clean)
        print(f"  [{clean[3]}] {clean[0]}: expected {clean[1]}, got {clean[2]}", flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def table(headers, rows):
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def family(name):
    if not name:
        return "unresolved"
    if "sm90_xmma" in name[:40]:
        return "sm90_xmma"
    if name.startswith("nvjet"):
        return "nvjet"
    if "cutlass" in name:
        return "cutlass"
    if name.startswith("triton"):
        return "triton"
    return "other"


def kernel_name_expr(tr, alias="e"):
    """SQL for the kernel name of launch row `alias` (empty when the trace has no kernel_names)."""
    cols = tr.columns("kernel_names") or []
    if not {"pid", "handle", "name"} <= set(cols):
        return "''", False
    return (f"COALESCE((SELECT k.name FROM kernel_names k WHERE k.pid = {alias}.pid AND k.handle = {alias}.arg0 "
            f"LIMIT 1), '')"), True


def losses(tr):
    if tr.columns("loss_counters") is None:
        return None
    return tr.q("SELECT source, kind, sum(count) FROM loss_counters GROUP BY source, kind HAVING sum(count) > 0")


def attachments(tr, pid=None):
    cols = tr.columns("attachments")
    if cols is None:
        return None, []
    where = f" WHERE pid = {int(pid)}" if pid is not None and "pid" in cols else ""
    return cols, tr.q(f"SELECT * FROM attachments{where}")


def print_attachments(cols, rows):
    if cols is None:
        print("attachments: this trace has no attachments table")
        return
    keep = [c for c in ("pid", "kind", "how", "complete", "attached_at", "path", "symbols", "missing", "note") if c in cols]
    idx = [cols.index(c) for c in keep]
    print(table(keep, [[str(r[i])[:90] for i in idx] for r in rows]) if rows else "attachments: no rows")


def max_runtime_duration(tr, pid, lo=None, hi=None):
    win = f" AND timestamp >= {lo} AND timestamp <= {hi}" if lo is not None else ""
    r = tr.q(f"SELECT max(duration) FROM events e WHERE pid = {pid} AND {rt('e')}{win}")
    return int(r[0][0] or 0) if r else 0


# Copies are split by direction in the nesting map: the runtime's cudaMemcpyKind (arg1) and the
# driver's direction (arg1), so the map tells which driver entry each kind of runtime copy reaches.
RT_KIND = "CASE WHEN r.source = 1 AND r.op IN (4, 7, 9, 10) THEN r.arg1 ELSE -1 END"
DRV_KIND = "CASE WHEN d.source = 4 AND d.op IN (2, 3) THEN d.arg1 ELSE -1 END"
MEMCPY_KIND = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 4: "Default"}


def nesting_map(tr, pid):
    """Rows (runtime source, op, kind, driver source, op, kind, driver calls, runtime calls containing
    one) per (runtime op, driver op) pair; the runtime totals (source, op, kind, calls, calls with no
    driver call inside); and the driver calls inside no runtime call (source, op, kind, calls)."""
    maxdur = max_runtime_duration(tr, pid)
    inside = (f"d.pid = r.pid AND d.tid = r.tid AND {drv('d')} "
              f"AND d.timestamp BETWEEN r.timestamp AND r.timestamp + r.duration "
              f"AND d.timestamp + d.duration <= r.timestamp + r.duration")
    pairs = tr.q(f"""
        SELECT r.source, r.op, {RT_KIND}, d.source, d.op, {DRV_KIND}, count(*), count(DISTINCT r.id)
        FROM events r JOIN events d ON {inside}
        WHERE r.pid = {pid} AND {rt('r')}
        GROUP BY 1, 2, 3, 4, 5, 6
        ORDER BY 1, 2, 3, 7 DESC""")
    totals = tr.q(f"""
        SELECT r.source, r.op, {RT_KIND}, count(*),
               sum(CASE WHEN EXISTS (SELECT 1 FROM events d WHERE {inside}) THEN 0 ELSE 1 END)
        FROM events r WHERE r.pid = {pid} AND {rt('r')}
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
    top = tr.q(f"""
        SELECT d.source, d.op, {DRV_KIND}, count(*) FROM events d
        WHERE d.pid = {pid} AND {drv('d')}
          AND NOT EXISTS (SELECT 1 FROM events r WHERE r.pid = d.pid AND r.tid = d.tid AND {rt('r')}
                          AND r.timestamp BETWEEN d.timestamp - {maxdur} AND d.timestamp
                          AND r.timestamp + r.duration >= d.timestamp + d.duration)
        GROUP BY 1, 2, 3 ORDER BY 4 DESC""")
    return pairs, totals, top


def op_label(tr, source, op, kind, runtime):
    name = tr.op_name(source, op)
    if kind is None or kind < 0:
        return name
    return f"{name} {MEMCPY_KIND.get(kind, kind)}" if runtime else f"{name} arg1={kind}"


def render_nesting(tr, pairs, totals, top):
    rows, summary = [], []
    for s, o, k, n, none in totals:
        inner = [p for p in pairs if (p[0], p[1], p[2]) == (s, o, k)]
        label = op_label(tr, s, o, k, True)
        first = True
        for _, _, _, ds, do, dk, dn, parents in inner:
            rows.append([label if first else "", n if first else "", op_label(tr, ds, do, dk, False), dn, parents])
            first = False
        if none:
            rows.append([label if first else "", n if first else "", "(no driver call)", "", none])
        if inner:
            summary.append(f"{label}->{op_label(tr, inner[0][3], inner[0][4], inner[0][5], False)} {inner[0][7]}/{n}")
        else:
            summary.append(f"{label}->none 0/{n}")
    for ds, do, dk, dn in top:
        rows.append(["(no runtime call: top level)", "", op_label(tr, ds, do, dk, False), dn, ""])
    if top:
        summary.append("top-level: " + " ".join(f"{op_label(tr, s, o, k, False)} {n}" for s, o, k, n in top[:4]))
    text = table(["runtime op", "calls", "driver op inside (same tid)", "driver calls", "runtime calls with it"], rows)
    return text, summary


# ---------------------------------------------------------------------------------------------- counts

def parse_program_log(path):
    calls, pid, kernels, done, notes = {}, None, [], False, []
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return calls, pid, kernels, done, notes
    for line in text.splitlines():
        p = line.split()
        if len(p) >= 3 and p[0] == "CALLS":
            calls[p[1]] = int(p[2])
        elif len(p) >= 2 and p[0] == "PID" and pid is None:
            pid = int(p[1])
        elif p and p[0] == "KERNELS":
            kernels = p[1:]
        elif p and p[0] == "DONE":
            done = True
        elif p and p[0] == "NOTE":
            notes.append(line)
    return calls, pid, kernels, done, notes


def cmd_counts(a, rows):
    L = a.label
    calls, pid, kernels, done, notes = parse_program_log(a.program_log)
    rows.add(f"{L}: program ran to the end", "DONE and CALLS lines", "yes" if done and calls else "no", "PASS" if done and calls else "FAIL")
    if pid is None:
        rows.add(f"{L}: program pid", "a PID line", "none", "FAIL")
        return
    for n in notes:
        print(n)
    tr = Trace(a.db, a.causeway)
    print(f"trace {a.db} read through {tr.how}; program pid {pid}")
    got = {}
    for s, o, arg1, n in tr.q(f"SELECT source, op, arg1, count(*) FROM events e WHERE pid = {pid} AND {rt('e')} GROUP BY source, op, arg1"):
        got[(s, o, arg1)] = got.get((s, o, arg1), 0) + n

    def count(key):
        s, o, k = API[key]
        return sum(n for (gs, go, g1), n in got.items() if (gs, go) == (s, o) and (k is None or g1 == k))

    runtime_total = sum(got.values())
    lost = losses(tr)
    lost_total = sum(r[2] for r in lost) if lost else 0
    lost_note = f" ({lost_total} events lost, counted)" if lost_total else ""
    cols, att = attachments(tr, pid)
    kinds = {}
    if cols and "kind" in cols:
        for r in att:
            kinds.setdefault(r[cols.index("kind")], []).append(r)
    print("\nattachments of this pid:")
    print_attachments(cols, att)

    exact = True
    if a.static:
        found = "runtime_static" in kinds or runtime_total > 0
        how = ("runtime found by symbol in the executable (attachments kind runtime_static)" if "runtime_static" in kinds
               else "runtime events recorded without a runtime_static attachment" if runtime_total else
               "runtime not visible (statically linked, not found by symbol)")
        rows.add(f"{L}: runtime visibility", "0 runtime events, or the static runtime found by symbol", f"{runtime_total} runtime events; {how}",
                 "PASS" if (runtime_total == 0 or "runtime_static" in kinds) else "FAIL")
        check_exact = found
    else:
        check_exact = True
    if check_exact:
        names = sorted(set(calls) | {k for k in API if count(k)})
        for name in names:
            if name not in API:
                rows.add(f"{L}: {name}", calls[name], "no op code for it in this check", "INFO")
                continue
            want, have = calls.get(name, 0), count(name)
            if want == have:
                st = "PASS"
            elif have == 0 and name not in REQUIRED:
                st = "INFO"
            else:
                st = "FAIL"
                exact = False
            note = " (not recorded by this build)" if have == 0 and want else ""
            rows.add(f"{L}: {name} count", want, f"{have}{note}{lost_note if want != have else ''}", st)
        known = {(API[k][0], API[k][1]) for k in API}
        for (s, o, _), _n in sorted(got.items()):
            if (s, o) not in known:
                n = sum(v for (gs, go, _x), v in got.items() if (gs, go) == (s, o))
                rows.add(f"{L}: unexpected {tr.op_name(s, o)}", 0, n, "FAIL")
                known.add((s, o))
                exact = False

    drv_rows = tr.q(f"SELECT source, op, count(*) FROM events e WHERE pid = {pid} AND {drv('e')} GROUP BY source, op ORDER BY count(*) DESC")
    drv_total = sum(r[2] for r in drv_rows)
    rows.add(f"{L}: driver events present", "> 0", f"{drv_total} ({', '.join(f'{tr.op_name(s, o)} {n}' for s, o, n in drv_rows[:6])})",
             "PASS" if drv_total > 0 else "FAIL")

    # Kernel names of the launches.
    expr, have_names = kernel_name_expr(tr)
    names = tr.q(f"""SELECT e.source, e.op, {expr}, count(*) FROM events e WHERE e.pid = {pid}
                     AND ((e.source = 1 AND e.op IN (3, 14)) OR (e.source = 4 AND e.op IN (1, 9)))
                     GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC""")
    print("\nkernel names of the launches (events.arg0 joined to kernel_names on pid, handle):")
    print(table(["op", "kernel name", "launches"], [[tr.op_name(s, o), n or "(unresolved)", c] for s, o, n, c in names]) if names else "no launches")
    ours = set(kernels or ["cw_step", "cw_cluster", "cw_graph_node"])
    rt_launch = [(n, c) for s, o, n, c in names if s == 1]
    resolved = sum(c for n, c in rt_launch if n and re.split(r"[(<\s]", n)[0] in ours)
    total = sum(c for _, c in rt_launch)
    drv_resolved = sum(c for s, o, n, c in names if s == 4 and n)
    drv_total_launch = sum(c for s, o, n, c in names if s == 4)
    status = "PASS" if have_names and total and resolved == total else ("INFO" if a.static else "FAIL")
    got_txt = (f"{resolved}/{total} runtime launches named {'/'.join(sorted(ours))}; driver launches named {drv_resolved}/{drv_total_launch}"
               if have_names else "no kernel_names table in this trace")
    rows.add(f"{L}: kernel names resolve", "every runtime launch named after a counts.cu kernel", got_txt, status)

    # Launch configuration of the cluster launches.
    ev_cols = tr.columns("events") or []
    lc_cols = tr.columns("launch_configs") or []
    if calls.get("cudaLaunchKernelExC"):
        if "launch_config" in ev_cols and {"cluster_x", "cluster_y", "cluster_z"} <= set(lc_cols):
            cl = tr.q(f"""SELECT c.cluster_x, c.cluster_y, c.cluster_z, count(*) FROM events e JOIN launch_configs c ON c.key = e.launch_config
                          WHERE e.pid = {pid} AND e.source = 1 AND e.op = 14 GROUP BY 1, 2, 3 ORDER BY 4 DESC""")
            good = sum(r[3] for r in cl if tuple(r[:3]) == (2, 1, 1))
            got_txt = ", ".join(f"({x},{y},{z}) x{n}" for x, y, z, n in cl) or "no configuration joined"
            dcl = tr.q(f"""SELECT c.cluster_x, c.cluster_y, c.cluster_z, count(*) FROM events e JOIN launch_configs c ON c.key = e.launch_config
                           WHERE e.pid = {pid} AND e.source = 4 AND e.op = 9 GROUP BY 1, 2, 3 ORDER BY 4 DESC""")
            if dcl:
                got_txt += "; cuLaunchKernelEx: " + ", ".join(f"({x},{y},{z}) x{n}" for x, y, z, n in dcl)
            ok = good == calls["cudaLaunchKernelExC"]
            rows.add(f"{L}: ExC launches carry cluster (2,1,1)", f"{calls['cudaLaunchKernelExC']} x (2,1,1)", got_txt,
                     "PASS" if ok else ("INFO" if a.static else "FAIL"))
        else:
            rows.add(f"{L}: ExC launches carry cluster (2,1,1)", "events.launch_config -> launch_configs.cluster_*",
                     "no launch_config column or launch_configs table", "INFO" if a.static else "FAIL")

    # The nesting map.
    pairs, totals, top = nesting_map(tr, pid)
    text, summary = render_nesting(tr, pairs, totals, top)
    print(f"\nnesting map ({L}): driver calls on the same thread inside each runtime call\n{text}")
    if a.nesting_out:
        with open(a.nesting_out, "w") as f:
            f.write(f"nesting map ({L}), trace {a.db}, pid {pid}\n{text}\n")
    rows.add(f"{L}: nesting map", "printed (see log)", "; ".join(summary) or "no runtime calls", "INFO")

    # Losses.
    if lost is None:
        rows.add(f"{L}: loss_counters", "all 0, or counted", "no loss_counters table", "FAIL")
    else:
        rows.add(f"{L}: loss_counters", "all 0, or counted",
                 "all 0" if not lost else ", ".join(f"source {s} {k}: {n}" for s, k, n in lost),
                 "PASS" if not lost or exact else "FAIL")

    # Attachments and coverage.
    if cols is not None:
        desc = []
        for k, rs in sorted(kinds.items()):
            for r in rs:
                d = dict(zip(cols, r))
                miss = d.get("missing")
                miss = f" missing={miss}" if miss not in (None, "", "[]") else ""
                desc.append(f"{k} how={d.get('how')} complete={d.get('complete')} {os.path.basename(str(d.get('path', '')))}{miss}")
        rows.add(f"{L}: attachments", "libraries attached (how, complete)", "; ".join(desc) or "no rows for this pid", "INFO")
    else:
        rows.add(f"{L}: attachments", "an attachments table", "none in this trace", "INFO" if a.static else "FAIL")
    if a.stats_json:
        try:
            st = json.load(open(a.stats_json))
            keys = {k: v for k, v in st.items() if k not in ("ops", "events", "first_ns", "last_ns", "window", "losses", "processes")}
            rows.add(f"{L}: causeway stats coverage", "what stats says about coverage", json.dumps(keys)[:400] if keys else "nothing beyond the counts", "INFO")
        except Exception as e:  # noqa: BLE001
            rows.add(f"{L}: causeway stats coverage", "stats --json readable", f"{type(e).__name__}: {e}", "INFO")


# ----------------------------------------------------------------------------------------------- train

def markers(tr, pid, t0, t1):
    """The two cudaDeviceSynchronize calls around a profiled window: A ends just before t0, B starts
    just after t1. Returns (a_ts, b_ts, note)."""
    syncs = tr.q(f"""SELECT timestamp, duration FROM events WHERE pid = {pid} AND source = 1 AND op = 6
                     AND timestamp BETWEEN {t0 - 10_000_000_000} AND {t1 + 10_000_000_000}""")
    slack = 20_000_000
    before = [(abs(ts + dur - t0), ts) for ts, dur in syncs if ts <= t0 + 1_000_000]
    after = [(abs(ts - t1), ts) for ts, dur in syncs if ts >= t1 - 1_000_000]
    if before and after and min(before)[0] < slack and min(after)[0] < slack:
        return min(before)[1], min(after)[1], "between the device syncs around the window"
    return t0, t1, "wall-clock window (no cudaDeviceSynchronize markers found)"


def cmd_train(a, rows):
    res = json.load(open(a.json))
    pid = res["pid"]
    tr = Trace(a.db, a.causeway)
    expr, have_names = kernel_name_expr(tr)
    L = a.label
    for ph in res.get("phases", []):
        name = ph["name"]
        if ph.get("error"):
            rows.add(f"{L} {name}: phase ran", "no error", ph["error"][:200], "FAIL")
            continue
        p = ph.get("profile")
        if not p or p.get("error"):
            rows.add(f"{L} {name}: profiler window", "parsed", (p or {}).get("error", "no profile"), "FAIL")
            continue
        lo, hi, how = markers(tr, pid, p["t0_ns"], p["t1_ns"])
        cw = {}
        for s, o, n in tr.q(f"""SELECT source, op, count(*) FROM events WHERE pid = {pid} AND timestamp > {lo} AND timestamp < {hi}
                                AND source IN (1, 4, 8) GROUP BY source, op"""):
            cw[(s, o)] = n
        maxdur = max_runtime_duration(tr, pid, lo, hi)
        nested_sql = (f"CASE WHEN {drv('e')} AND EXISTS (SELECT 1 FROM events r WHERE r.pid = e.pid AND r.tid = e.tid AND {rt('r')} "
                      f"AND r.timestamp BETWEEN e.timestamp - {maxdur} AND e.timestamp "
                      f"AND r.timestamp + r.duration >= e.timestamp + e.duration) THEN 1 ELSE 0 END")
        launches = tr.q(f"""SELECT e.source, e.op, {expr}, {nested_sql}, count(*) FROM events e
                            WHERE e.pid = {pid} AND e.timestamp > {lo} AND e.timestamp < {hi}
                              AND ((e.source = 1 AND e.op IN (3, 14)) OR (e.source = 4 AND e.op IN (1, 9)) OR (e.source = 8 AND e.op IN (4, 5)))
                            GROUP BY 1, 2, 3, 4""")
        top = {}
        for s, o, _n, nested, c in launches:
            if not nested:
                top[(s, o)] = top.get((s, o), 0) + c
        api = p.get("api", {})
        print(f"\n{L} {name}: window {how}; {p['steps']} steps; Causeway ops in the window:")
        print(table(["op", "Causeway", "top level", "profiler"],
                    [[tr.op_name(s, o), n, top.get((s, o), ""), api.get(tr.op_name(s, o), "")] for (s, o), n in sorted(cw.items())]))
        print("profiler API counts in the window: " + json.dumps(api, sort_keys=True))
        # Only cudaLaunchKernel must match exactly (the shared libcudart's launches). The other runtime
        # APIs are compared and reported: CUPTI also sees the static runtimes inside libraries
        # (cuBLAS, cuDNN, NCCL), which Causeway cannot probe unless it finds them by symbol.
        for prof_name, key, kind in [
            ("cudaLaunchKernel", (1, 3), "required"), ("cudaLaunchKernelExC", (1, 14), "runtime"),
            ("cudaMemcpyAsync", (1, 7), "runtime"), ("cudaStreamSynchronize", (1, 5), "runtime"),
            ("cudaGraphLaunch", (8, 4), "runtime"), ("cuLaunchKernel", (4, 1), "driver"),
            ("cuLaunchKernelEx", (4, 9), "driver"), ("cuGraphLaunch", (8, 5), "driver"),
        ]:
            want, have, have_top = api.get(prof_name, 0), cw.get(key, 0), top.get(key, 0)
            if not want and not have:
                continue
            if kind == "driver":
                # CUPTI may or may not report the driver calls the runtime makes: equal to either the
                # top-level or the total count passes.
                st = "PASS" if want in (have, have_top) else "INFO"
                got = f"{have} ({have_top} top level)"
            else:
                st = "PASS" if want == have else ("FAIL" if kind == "required" else "INFO")
                got = str(have) if want == have else f"{have} (differs by {have - want:+d})"
            rows.add(f"{L} {name}: {prof_name} in window", f"{want} (profiler)", got, st)
        k = p.get("kernels", {})
        seen_fam = {}
        for s, o, kname, nested, c in launches:
            if s == 8 or nested:
                continue
            f = family(kname) if have_names else "unresolved"
            seen_fam[f] = seen_fam.get(f, 0) + c
        graph_fam = {f: sum(v for l, v in d.items() if l in ("cudaGraphLaunch", "cuGraphLaunch")) for f, d in k.get("by_family_launcher", {}).items()}
        seen = sum(seen_fam.values())
        graph = sum(graph_fam.values())
        gap = k.get("total", 0) - seen - graph
        fams = sorted(set(k.get("by_family", {})) | set(seen_fam))
        by = []
        for f in fams:
            g = k.get("by_family", {}).get(f, 0) - seen_fam.get(f, 0) - graph_fam.get(f, 0)
            by.append(f"{f} {g:+d}" if f != "unresolved" else f"unresolved -{seen_fam.get(f, 0)}")
        print(f"CUPTI kernels {k.get('total', 0)} by family {json.dumps(k.get('by_family', {}))}, by launcher {json.dumps(k.get('by_launcher', {}))}; "
              f"uncorrelated {k.get('uncorrelated', 0)}")
        print(f"Causeway launches by family (runtime + top-level driver + Ex): {json.dumps(seen_fam)}; kernels inside graphs (profiler): {graph}")
        for fam, ex in k.get("examples", {}).items():
            print(f"  e.g. {fam}: {' | '.join(ex)}")
        rows.add(f"{L} {name}: kernel gap CUPTI - seen", "0 (reported)",
                 f"{gap} = {k.get('total', 0)} - ({seen} launches + {graph} in graphs); by family: {', '.join(by)}", "INFO")
        if ph.get("steps_per_s") is not None:
            rows.add(f"{L} {name}: steps/s traced", "measured", ph["steps_per_s"], "INFO")


def cmd_overhead(a, rows):
    """Steps/s of the traced runs against the untraced ones, per phase: the median of each kind and
    every run's figure, so that the spread between runs of one kind (the noise) is in the row."""
    def per_phase(paths):
        out = {}
        for path in paths:
            for p in json.load(open(path)).get("phases", []):
                if p.get("steps_per_s"):
                    out.setdefault(p["name"], []).append(p["steps_per_s"])
        return out

    def median(xs):
        s = sorted(xs)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    t, u = per_phase(a.traced), per_phase(a.untraced)
    for name in ("eager", "compile", "cudagraphs"):
        if name in t and name in u:
            mt, mu = median(t[name]), median(u[name])
            runs = ""
            if len(t[name]) > 1 or len(u[name]) > 1:
                runs = (f" (medians; traced runs {', '.join(str(x) for x in t[name])};"
                        f" untraced runs {', '.join(str(x) for x in u[name])})")
            rows.add(f"overhead {name}: steps/s traced / untraced", "measured (1.0 = no overhead)",
                     f"{mt:g} / {mu:g} = {mt / mu:.3f}{runs}", "INFO")


# ------------------------------------------------------------------------------------------------ diag

def chain_line(c):
    cul = c.get("culprit") or {}
    who = f"{cul.get('comm')}({cul.get('pid')}) {cul.get('role')}" if cul else "-"
    return (f"{c.get('id')} {c.get('severity')} {c.get('kind')}/{c.get('cause')} op={c.get('op')} culprit={who} "
            f"stall={c.get('stall_ns', 0) / 1e6:.1f}ms share={c.get('share', 0):.3f} of {c.get('share_of')}")


def sync_cpu(tr, pid, lo):
    """Per sync op: calls, time inside, and the part of it the thread spent off-CPU (preempted / asleep)."""
    overlap = ("min(s.timestamp, c.timestamp + c.duration) - max(s.timestamp - s.duration, c.timestamp)")
    sub = (f"FROM events s WHERE s.source = 3 AND s.op = 1 AND s.pid = c.pid AND s.tid = c.tid "
           f"AND s.timestamp > c.timestamp AND s.timestamp <= c.timestamp + c.duration "
           f"AND s.timestamp - s.duration < c.timestamp + c.duration")
    return tr.q(f"""SELECT c.op, count(*), sum(c.duration),
                      sum(COALESCE((SELECT sum(CASE WHEN s.prev_state = 0 THEN {overlap} ELSE 0 END) {sub}), 0)),
                      sum(COALESCE((SELECT sum(CASE WHEN s.prev_state <> 0 THEN {overlap} ELSE 0 END) {sub}), 0))
                    FROM events c WHERE c.pid = {pid} AND c.source = 1 AND c.op IN (5, 6, 13) AND c.timestamp >= {lo}
                    GROUP BY c.op""")


def cmd_diag(a, rows):
    L = a.label
    st_req = "FAIL" if a.required else "INFO"
    ex = json.load(open(a.explain))
    hog_pid, hog_name = None, None
    for line in open(a.hog_log, errors="replace"):
        p = line.split()
        if len(p) >= 3 and p[0] == "HOG":
            hog_pid, hog_name = int(p[1]), p[2]
    chains = ex.get("chains") or []
    print(f"\n{L}: verdict: {ex.get('verdict')}")
    print(f"{L}: {len(chains)} of {ex.get('chains_total')} chains; hog pid {hog_pid} comm {hog_name}")
    for c in chains[:6]:
        print("  " + chain_line(c))
    if hog_pid is None:
        rows.add(f"{L}: hog started", "HOG pid name", "no HOG line", "FAIL")
        return
    c1 = chains[0] if chains else None
    if not c1:
        rows.add(f"{L}: c1 names the hog", f"{hog_name} pid {hog_pid}", "no chain", st_req)
    else:
        cul = c1.get("culprit") or {}
        by_culprit = cul.get("pid") == hog_pid and cul.get("comm") == hog_name
        in_text = str(hog_pid) in json.dumps(c1.get("summary", "")) and hog_name in json.dumps(c1.get("summary", ""))
        cpus = [x.get("cpu") for x in c1.get("cpus", [])]
        ok = by_culprit or in_text
        rows.add(f"{L}: c1 names the hog", f"{hog_name} pid {hog_pid} (cause preempted, cpu {a.cpu})",
                 f"{c1.get('cause')} op={c1.get('op')} culprit={cul.get('comm')}({cul.get('pid')}) cpus={cpus[:3]} share={c1.get('share', 0):.3f}",
                 "PASS" if ok else st_req)
        ev = c1.get("evidence") or {}
        if ev.get("sql") and a.causeway:
            try:
                r = subprocess.run([a.causeway, "query", "--db", a.db, "--json", ev["sql"]], capture_output=True, text=True, timeout=120)
                j = json.loads(r.stdout) if r.returncode == 0 else None
                val = None
                if j and j.get("rows"):
                    cols = j.get("columns", [])
                    val = j["rows"][0][cols.index("value")] if "value" in cols else j["rows"][0][0]
                rows.add(f"{L}: c1 evidence SQL recomputes its figure", f"{ev.get('value')} {ev.get('unit')}",
                         val if j else f"query failed: {r.stderr.strip()[-200:]}", "PASS" if val == ev.get("value") else st_req)
            except Exception as e:  # noqa: BLE001
                rows.add(f"{L}: c1 evidence SQL recomputes its figure", ev.get("value"), f"{type(e).__name__}: {e}", st_req)
        others = [c for c in chains[1:] if c.get("severity") == "HIGH" and (c.get("culprit") or {}).get("pid") not in (hog_pid, None)]
        rows.add(f"{L}: other HIGH chains (not the hog)", "none", "; ".join(chain_line(c) for c in others[:2]) or "none", "INFO")
    # GPU utilisation and steps/s with and without the hog.
    try:
        res = json.load(open(a.train_json))
        h0, h1 = a.hog_start_ns, a.hog_end_ns
        d = res.get("diag") or {}
        samples = [s for s in (res.get("nvml") or {}).get("samples", []) if d.get("start_ns", 0) <= s[0] <= d.get("end_ns", 1 << 62)]
        inh = [s[1] for s in samples if h0 <= s[0] <= h1]
        out = [s[1] for s in samples if not (h0 - 1_000_000_000 <= s[0] <= h1 + 1_000_000_000)]
        if inh and out:
            rows.add(f"{L}: NVML GPU util during hog vs clean", "lower during the hog",
                     f"{sum(inh) / len(inh):.1f}% vs {sum(out) / len(out):.1f}% ({len(inh)}+{len(out)} samples)", "INFO")
        else:
            rows.add(f"{L}: NVML GPU util during hog vs clean", "samples", (res.get("nvml") or {}).get("error") or "no samples", "INFO")
        if d.get("steps_per_bin"):
            b = d["bin_ns"]
            hog_bins, clean_bins = [], []
            for i, n in enumerate(d["steps_per_bin"][:-1]):
                t = d["start_ns"] + i * b
                if t >= h0 and t + b <= h1:
                    hog_bins.append(n)
                elif t + b < h0 - 1_000_000_000 or t > h1 + 1_000_000_000:
                    clean_bins.append(n)
            if hog_bins and clean_bins:
                f = 1e9 / b
                rows.add(f"{L}: steps/s during hog vs clean", "lower during the hog",
                         f"{sum(hog_bins) / len(hog_bins) * f:.1f} vs {sum(clean_bins) / len(clean_bins) * f:.1f}", "INFO")
        if res.get("blocking_sync"):
            bs = res["blocking_sync"]
            tr = Trace(a.db, a.causeway)
            rec = tr.q(f"SELECT arg0, count(*) FROM events WHERE pid = {res['pid']} AND source = 1 AND op = 21 GROUP BY arg0")
            rows.add(f"{L}: cudaSetDeviceFlags(4) in effect", "rc 0, flags & 7 == 4, recorded",
                     f"rc {bs.get('rc')}, flags after init {bs.get('flags_after_init')}, recorded {rec or 'no'}", "INFO")
    except Exception as e:  # noqa: BLE001
        rows.add(f"{L}: train results", "readable", f"{type(e).__name__}: {e}", "INFO")


def cmd_compare(a, rows):
    out = []
    for label, db, exp, tj in (("spin", a.spin_db, a.spin_explain, a.spin_json), ("blocking", a.blocking_db, a.blocking_explain, a.blocking_json)):
        ex = json.load(open(exp))
        chains = ex.get("chains") or []
        print(f"\n{label}: {ex.get('verdict')}")
        for c in chains[:5]:
            print("  " + chain_line(c))
        pid = json.load(open(tj))["pid"]
        start = (json.load(open(tj)).get("diag") or {}).get("start_ns", 0)
        tr = Trace(db, a.causeway)
        sc = sync_cpu(tr, pid, start)
        print(table(["sync op", "calls", "time ms", "preempted ms", "asleep ms"],
                    [[tr.op_name(1, o), n, f"{d / 1e6:.1f}", f"{p / 1e6:.1f}", f"{s / 1e6:.1f}"] for o, n, d, p, s in sc]))
        tot = sum(r[2] for r in sc) or 1
        off = sum(r[3] + r[4] for r in sc)
        c1 = chains[0] if chains else {}
        causes = {}
        for c in chains:
            causes[c.get("cause")] = causes.get(c.get("cause"), 0) + 1
        out.append(f"{label}: c1 {c1.get('cause')}/{c1.get('op')} by {(c1.get('culprit') or {}).get('comm')}; "
                   f"sync time off-CPU {off / tot:.0%}; causes {json.dumps(causes)}")
    rows.add("diag spin vs blocking sync: chains", "reported", " | ".join(out), "INFO")


# ------------------------------------------------------------------------------------------------ late

def cmd_late(a, rows):
    pid, t_import, t_cuda, segments, done = None, None, None, None, False
    for line in open(a.program_log, errors="replace"):
        p = line.split()
        if len(p) >= 2 and p[0] == "PID" and pid is None:
            pid = int(p[1])
        elif len(p) >= 2 and p[0] == "T_IMPORT":
            t_import = int(p[1])
        elif len(p) >= 2 and p[0] == "T_FIRST_CUDA":
            t_cuda = int(p[1])
        elif len(p) >= 2 and p[0] == "SEGMENTS":
            segments = int(p[1])
        elif p and p[0] == "DONE":
            done = True
    rows.add("late attach: program ran", "DONE", "yes" if done else "no", "PASS" if done else "FAIL")
    if pid is None:
        return
    tr = Trace(a.db, a.causeway)
    cols, att = attachments(tr, pid)
    print_attachments(cols, att)
    runtime_complete = None
    if cols is None:
        rows.add("late attach: attachments table", "rows for libcudart and libcuda (how, complete)", "no attachments table", "FAIL")
    else:
        d = [dict(zip(cols, r)) for r in att]
        desc = []
        for x in d:
            at = x.get("attached_at")
            rel = ""
            if isinstance(at, int) and t_import:
                rel = f" at import{(at - t_import) / 1e6:+.0f}ms"
            desc.append(f"{x.get('kind')} how={x.get('how')} complete={x.get('complete')}{rel}")
            if x.get("kind") == "runtime":
                runtime_complete = x.get("complete")
        kinds = {x.get("kind") for x in d}
        ok = "runtime" in kinds and "driver" in kinds
        rows.add("late attach: attachments table", "runtime and driver rows (how, complete)", "; ".join(desc) or "no rows for the pid", "PASS" if ok else "FAIL")
    m = tr.q(f"SELECT count(*), min(timestamp) FROM events WHERE pid = {pid} AND source = 1 AND op = 1")
    n, first = (m[0] if m else (0, None))
    dm = tr.q(f"SELECT count(*) FROM events WHERE pid = {pid} AND source = 4 AND op = 5")
    first_rt = tr.q(f"SELECT min(timestamp) FROM events e WHERE pid = {pid} AND {rt('e')}")
    rel = f", first at first-CUDA{(first - t_cuda) / 1e6:+.0f}ms" if first and t_cuda else ""
    got = f"{n} cudaMalloc, {dm[0][0] if dm else 0} cuMemAlloc{rel}; allocator made {segments}"
    if first_rt and first_rt[0][0] and t_import:
        got += f"; first runtime event at import{(first_rt[0][0] - t_import) / 1e6:+.0f}ms"
    if segments is not None and segments >= 1 and n >= segments:
        st = "PASS"
    elif runtime_complete in (0, False, "0", "false"):
        st = "INFO"
        got += " (missed, and the attachment says incomplete)"
    else:
        st = "FAIL"
    rows.add("late attach: first cudaMalloc recorded", f"{segments} cudaMalloc (segment.all.allocated)", got, st)
    lost = losses(tr)
    if lost:
        rows.add("late attach: loss_counters", "all 0, or counted", ", ".join(f"source {s} {k}: {n}" for s, k, n in lost), "INFO")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", help="append result rows here (TSV)")
    ap.add_argument("--causeway", help="causeway binary (evidence SQL; fallback query path)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("counts")
    c.add_argument("--db", required=True)
    c.add_argument("--program-log", required=True)
    c.add_argument("--label", required=True)
    c.add_argument("--static", action="store_true")
    c.add_argument("--stats-json")
    c.add_argument("--nesting-out")
    t = sub.add_parser("train")
    t.add_argument("--db", required=True)
    t.add_argument("--json", required=True)
    t.add_argument("--label", default="train")
    o = sub.add_parser("overhead")
    o.add_argument("--traced", required=True, nargs="+", help="train.py JSON of each traced run")
    o.add_argument("--untraced", required=True, nargs="+", help="train.py JSON of each untraced run")
    d = sub.add_parser("diag")
    d.add_argument("--db", required=True)
    d.add_argument("--explain", required=True)
    d.add_argument("--hog-log", required=True)
    d.add_argument("--hog-start-ns", type=int, default=0)
    d.add_argument("--hog-end-ns", type=int, default=0)
    d.add_argument("--train-json", required=True)
    d.add_argument("--label", required=True)
    d.add_argument("--cpu", type=int, default=2)
    d.add_argument("--required", action="store_true")
    m = sub.add_parser("compare")
    for k in ("spin-db", "spin-explain", "spin-json", "blocking-db", "blocking-explain", "blocking-json"):
        m.add_argument("--" + k, required=True)
    la = sub.add_parser("late")
    la.add_argument("--db", required=True)
    la.add_argument("--program-log", required=True)
    a = ap.parse_args()
    rows = Rows(a.rows)
    fn = {"counts": cmd_counts, "train": cmd_train, "overhead": cmd_overhead, "diag": cmd_diag, "compare": cmd_compare,
          "late": cmd_late}[a.cmd]
    try:
        fn(a, rows)
    except Exception as e:  # noqa: BLE001 - a broken check is a FAIL row, never a lost run
        import traceback

        traceback.print_exc()
        rows.add(f"analyze {a.cmd} {getattr(a, 'label', '')}".strip(), "ran", f"{type(e).__name__}: {e}"[:300], "FAIL")
        sys.exit(1)


if __name__ == "__main__":
    main()
