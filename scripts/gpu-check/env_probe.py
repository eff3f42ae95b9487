#!/usr/bin/env python3
"""Environment facts for the GPU acceptance run (scripts/gpu-check.sh), as one JSON object on stdout.

Imports torch, initialises CUDA with `torch.ones(1, device="cuda")`, then reads /proc/self/maps for the
CUDA libraries this process really mapped (libcudart, libcuda, libcublas, libnccl, ...), and asks the
dynamic linker (dlsym, no call) which driver entry points the mapped libcuda exports. Never fails:
what could not be read is reported as an error string.
"""

import ctypes
import json
import os
import re
import sys

SYMBOLS = [
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuCtxSynchronize", "cuCtxSynchronize_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz",
    "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuMemcpyBatchAsync", "cuMemcpyBatchAsync_v2",
]

LIB_RE = re.compile(r"/(lib(cud[a-z_]*|nccl|cublas[A-Za-z]*|cupti|nvrtc|cudnn[a-z_]*)[^/]*\.so[^/]*)$")


def mapped_libs():
    libs = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            path = parts[5].strip()
            m = LIB_RE.search(path)
            if m:
                libs.setdefault(path, {"path": path, "dev": parts[3], "inode": int(parts[4])})
    return sorted(libs.values(), key=lambda x: x["path"])


def main():
    out = {"python": sys.version.split()[0], "executable": sys.executable, "pid": os.getpid()}
    try:
        import torch

        out["torch"] = torch.__version__
        out["torch_cuda"] = torch.version.cuda
        out["cuda_available"] = torch.cuda.is_available()
        if out["cuda_available"]:
            torch.ones(1, device="cuda")
            torch.cuda.synchronize()
            p = torch.cuda.get_device_properties(0)
            out["device"] = p.name
            out["capability"] = f"{p.major}.{p.minor}"
            out["multiprocessors"] = p.multi_processor_count
            out["cudnn"] = torch.backends.cudnn.version()
            try:
                out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            except Exception as e:  # noqa: BLE001 - a fact we could not read is reported, not fatal
                out["nccl"] = f"error: {e}"
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        out["triton"] = f"error: {e}"
    try:
        import pynvml  # noqa: F401

        out["pynvml"] = True
    except Exception:  # noqa: BLE001
        out["pynvml"] = False
    out["libs"] = mapped_libs()
    libcuda = [lib["path"] for lib in out["libs"] if re.search(r"/libcuda\.so", lib["path"])]
    libcudart = [lib["path"] for lib in out["libs"] if re.search(r"/libcudart[-.]", lib["path"])]
    out["libcuda"] = libcuda[0] if libcuda else None
    out["libcudart"] = libcudart[0] if libcudart else None
    if out["libcuda"]:
        try:
            lib = ctypes.CDLL(out["libcuda"])
            out["libcuda_symbols"] = {s: hasattr(lib, s) for s in SYMBOLS}
            v = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
                out["driver_cuda_version"] = v.value
        except OSError as e:
            out["libcuda_symbols"] = f"error: {e}"
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
