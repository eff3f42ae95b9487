#!/usr/bin/env python3
"""A small bf16 transformer training loop with the profiler's counts as ground truth, for Causeway's
GPU acceptance run (scripts/gpu-check.sh).

Phases (each with a fresh model and AdamW, a 1 s sleep between them so they stand apart in a trace):
  eager       plain PyTorch: cudaLaunchKernel from libtorch_cuda, cuBLAS GEMMs (cuLaunchKernel(Ex))
  compile     torch.compile: Triton kernels through Inductor's launcher (cuLaunchKernel)
  cudagraphs  torch.compile(mode="reduce-overhead"): the model replayed as CUDA graphs (cudaGraphLaunch)

Each phase runs --warmup steps (compilation happens there), --steps timed steps (steps/s), then a
window of --profile-steps steps under torch.profiler (CUPTI). Each step copies a pinned batch to the
GPU (cudaMemcpyAsync), runs forward/backward/AdamW and reads the loss with .item() (cudaMemcpyAsync +
cudaStreamSynchronize). The window is bracketed by torch.cuda.synchronize() (cudaDeviceSynchronize)
on both sides, so a tracer's calls of the window lie strictly between those two device syncs, and by
a record_function range ("cw_window") that selects the same calls in the profiler's trace.

--secs S runs the eager loop for S seconds without the profiler (the diagnosis runs): it prints
TRAIN_START <unix ns> once warm and TRAIN_END <unix ns> at the end, and records steps per 0.5 s.
--blocking-sync calls cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) through ctypes on the
libcudart torch mapped, after `import torch` and before CUDA is initialised.

NVML GPU utilisation is sampled at 10 Hz when pynvml (nvidia-ml-py) imports. Results go to --json.
"""

import argparse
import ctypes
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

API_OF_INTEREST = [
    "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaMemcpyAsync",
    "cudaStreamSynchronize", "cudaGraphLaunch", "cuGraphLaunch", "cudaDeviceSynchronize",
]


def log(*a):
    print(*a, flush=True)


def mapped_libcudart():
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and re.search(r"/libcudart[-.][^/]*$|/libcudart\.so", parts[5].strip()):
                return parts[5].strip()
    return None


def api_base(name):
    """cudaLaunchKernel_v7000 -> cudaLaunchKernel; cuLaunchKernelEx_ptsz -> cuLaunchKernelEx."""
    prev = None
    while prev != name:
        prev = name
        name = re.sub(r"(_v\d+|_ptsz|_ptds)$", "", name)
    return name


def family(kernel_name):
    n = kernel_name
    if n.startswith("sm90_xmma") or "sm90_xmma" in n[:40]:
        return "sm90_xmma"
    if n.startswith("nvjet"):
        return "nvjet"
    if "cutlass" in n:
        return "cutlass"
    if n.startswith("triton_") or n.startswith("triton"):
        return "triton"
    return "other"


class Nvml:
    """GPU utilisation at 10 Hz on a daemon thread; `samples` = [[unix ns, gpu %, memory %], ...]."""

    def __init__(self, hz=10.0):
        self.samples, self.error = [], None
        self.stop_ev = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as e:  # noqa: BLE001 - NVML is optional
            self.error = f"{type(e).__name__}: {e}"
            return
        self.period = 1.0 / hz
        self.t = threading.Thread(target=self.run, name="nvml-sampler", daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                u = self.nvml.nvmlDeviceGetUtilizationRates(self.h)
                self.samples.append([time.time_ns(), int(u.gpu), int(u.memory)])
            except Exception as e:  # noqa: BLE001
                self.error = f"{type(e).__name__}: {e}"
                return
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        return {"hz": 10, "samples": self.samples, "error": self.error}


def parse_profile(path, window_name="cw_window"):
    """Counts from a Kineto chrome trace: runtime/driver API calls inside the record_function range,
    and the GPU kernels those calls launched, by name family and by launching API."""
    with open(path) as f:
        d = json.load(f)
    evs = d.get("traceEvents", [])
    wins = [e for e in evs if e.get("name") == window_name and e.get("cat") == "user_annotation"]
    if not wins:
        return {"error": f"no '{window_name}' range in the profiler trace"}
    w0 = float(wins[0]["ts"])
    w1 = w0 + float(wins[0].get("dur", 0))
    api, corr = {}, {}
    for e in evs:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver") or e.get("ph") != "X":
            continue
        ts = float(e.get("ts", -1))
        if not (w0 <= ts <= w1):
            continue
        name = api_base(str(e.get("name", "")))
        api[name] = api.get(name, 0) + 1
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            corr[c] = name
    kernels = {"total": 0, "by_family": {}, "by_launcher": {}, "by_family_launcher": {}, "uncorrelated": 0,
               "examples": {}}
    for e in evs:
        if e.get("cat") != "kernel":
            continue
        c = (e.get("args") or {}).get("correlation")
        launcher = corr.get(c)
        if launcher is None:
            kernels["uncorrelated"] += 1
            continue
        fam = family(str(e.get("name", "")))
        kernels["total"] += 1
        kernels["by_family"][fam] = kernels["by_family"].get(fam, 0) + 1
        kernels["by_launcher"][launcher] = kernels["by_launcher"].get(launcher, 0) + 1
        fl = kernels["by_family_launcher"].setdefault(fam, {})
        fl[launcher] = fl.get(launcher, 0) + 1
        ex = kernels["examples"].setdefault(fam, [])
        if len(ex) < 3 and e.get("name") not in ex:
            ex.append(str(e.get("name"))[:160])
    return {"window_us": [w0, w1], "api": api, "kernels": kernels}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="eager,compile,cudagraphs", help="comma-separated: eager, compile, cudagraphs")
    ap.add_argument("--eager", action="store_true", help="the eager phase only")
    ap.add_argument("--steps", type=int, default=300, help="timed steps per phase")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--profile-steps", type=int, default=20)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--secs", type=float, default=0.0, help="run the eager loop this long (no profiler)")
    ap.add_argument("--sleep-between", type=float, default=1.0)
    ap.add_argument("--blocking-sync", action="store_true")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--trace-dir", help="keep the profiler traces here (gzip)")
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    phases = ["eager"] if (args.eager or args.secs > 0) else [p for p in args.phases.split(",") if p]

    res = {"pid": os.getpid(), "argv": sys.argv, "phases": [], "started_ns": time.time_ns()}

    def dump(r):
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(r, f, indent=1)
            os.replace(tmp, args.json)
    log("PID", os.getpid())
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    res["torch"] = torch.__version__
    res["torch_cuda"] = torch.version.cuda
    if args.blocking_sync:
        path = mapped_libcudart()
        bs = {"libcudart": path}
        if path:
            try:
                lib = ctypes.CDLL(path)
                bs["rc"] = int(lib.cudaSetDeviceFlags(ctypes.c_uint(4)))
                bs["lib"] = lib
            except OSError as e:
                bs["error"] = str(e)
        else:
            bs["error"] = "torch mapped no libcudart"
        log("SETFLAGS", bs.get("rc"), path)
        res["blocking_sync"] = bs

    dev = torch.device("cuda")
    torch.ones(1, device=dev)
    torch.cuda.synchronize()
    if args.blocking_sync and "lib" in res["blocking_sync"]:
        flags = ctypes.c_uint(0)
        lib = res["blocking_sync"].pop("lib")
        rc = lib.cudaGetDeviceFlags(ctypes.byref(flags))
        res["blocking_sync"]["flags_after_init"] = flags.value if rc == 0 else f"rc {rc}"
        log("FLAGS", res["blocking_sync"]["flags_after_init"])
    nvml = Nvml()

    d, h = args.d_model, args.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    x_cpu = torch.randn(args.batch, args.seq, d, dtype=torch.bfloat16).pin_memory()
    target = torch.randn(args.batch, args.seq, d, device=dev)

    def make(phase):
        torch.manual_seed(0)
        model = nn.Sequential(*[Block() for _ in range(args.layers)]).to(device=dev, dtype=torch.bfloat16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fn = model
        if phase == "compile":
            torch._dynamo.reset()
            fn = torch.compile(model)
        elif phase == "cudagraphs":
            torch._dynamo.reset()
            fn = torch.compile(model, mode="reduce-overhead")
        mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

        def step():
            if phase == "cudagraphs" and mark is not None:
                mark()
            xb = x_cpu.to(dev, non_blocking=True)
            out = fn(xb)
            loss = F.mse_loss(out.float(), target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

        return step

    if args.secs > 0:
        step = make("eager")
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        start = time.time_ns()
        log("TRAIN_START", start)
        bin_ns, bins, n = 500_000_000, [], 0
        end = start + int(args.secs * 1e9)
        while True:
            step()
            n += 1
            now = time.time_ns()
            b = (now - start) // bin_ns
            while len(bins) <= b:
                bins.append(0)
            bins[b] += 1
            if now >= end:
                break
        log("TRAIN_END", time.time_ns(), "steps", n)
        res["diag"] = {"start_ns": start, "end_ns": time.time_ns(), "steps": n, "bin_ns": bin_ns, "steps_per_bin": bins}
    else:
        from torch.profiler import ProfilerActivity, profile, record_function

        for i, phase in enumerate(phases):
            if i:
                time.sleep(args.sleep_between)
            rec = {"name": phase, "phase_start_ns": time.time_ns()}
            log("PHASE", phase, rec["phase_start_ns"])
            try:
                step = make(phase)
                t = time.perf_counter()
                for _ in range(args.warmup):
                    step()
                torch.cuda.synchronize()
                rec["warmup_s"] = round(time.perf_counter() - t, 3)
                t = time.perf_counter()
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
                dt = time.perf_counter() - t
                rec["steps"] = args.steps
                rec["steps_per_s"] = round(args.steps / dt, 2) if dt > 0 else None
                log("STEPS_PER_S", phase, rec["steps_per_s"])
                if not args.no_profile and args.profile_steps > 0:
                    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                    prof.start()
                    torch.cuda.synchronize()  # marker A: the window starts after this call
                    t0 = time.time_ns()
                    with record_function("cw_window"):
                        for _ in range(args.profile_steps):
                            step()
                    t1 = time.time_ns()
                    torch.cuda.synchronize()  # marker B: the window ends before this call
                    prof.stop()
                    tmp = tempfile.mkdtemp(prefix="cw-prof-")
                    path = os.path.join(tmp, f"{phase}.json")
                    prof.export_chrome_trace(path)
                    p = parse_profile(path)
                    p.update({"t0_ns": t0, "t1_ns": t1, "steps": args.profile_steps})
                    if args.trace_dir:
                        os.makedirs(args.trace_dir, exist_ok=True)
                        dst = os.path.join(args.trace_dir, f"profile-{phase}.json.gz")
                        with open(path, "rb") as src, gzip.open(dst, "wb") as out:
                            shutil.copyfileobj(src, out)
                        p["trace_file"] = dst
                    shutil.rmtree(tmp, ignore_errors=True)
                    rec["profile"] = p
                    log("PROFILE", phase, json.dumps({k: p.get("api", {}).get(k, 0) for k in API_OF_INTEREST}),
                        "kernels", p.get("kernels", {}).get("total"))
            except Exception as e:  # noqa: BLE001 - one broken phase must not lose the others
                rec["error"] = f"{type(e).__name__}: {e}"
                log("PHASE_ERROR", phase, rec["error"])
            rec["phase_end_ns"] = time.time_ns()
            res["phases"].append(rec)
            dump(res)  # a run stopped by its time limit keeps the phases it finished

    res["nvml"] = nvml.stop()
    res["ended_ns"] = time.time_ns()
    dump(res)
    log("DONE")


if __name__ == "__main__":
    main()
