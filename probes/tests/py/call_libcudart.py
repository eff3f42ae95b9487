"""Calls a real CUDA runtime from PyPI through ctypes, the way a framework would, and prints every
return code: `RC <name> <rc>,<rc>,...`. argv: N [cu12|cu13]: libcudart.so.12 of nvidia-cuda-runtime-cu12
(nvidia/cuda_runtime/lib) or libcudart.so.13 of nvidia-cuda-runtime 13 (nvidia/cu13/lib). Without a
GPU driver each call fails fast with cudaErrorInsufficientDriver (35). Used by
probes/tests/real_libcudart.rs."""
import ctypes
import glob
import os
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
FLAVOUR = sys.argv[2] if len(sys.argv) > 2 else "cu12"
PKG, SONAME = {"cu12": ("cuda_runtime", "libcudart.so.12"), "cu13": ("cu13", "libcudart.so.13")}[FLAVOUR]
libs = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", PKG, "lib", SONAME))
if not libs:
    print("NOLIB")
    sys.exit(3)
rt = ctypes.CDLL(libs[0])


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


rcs = {}


def rec(name, rc):
    rcs.setdefault(name, []).append(rc)


ptr = ctypes.c_void_p()
buf = ctypes.create_string_buffer(64)
for _ in range(N):
    rec("cudaMalloc", rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4096)))
for _ in range(N):
    rec("cudaFree", rt.cudaFree(ptr))
rec("cudaMemcpy", rt.cudaMemcpy(buf, buf, ctypes.c_size_t(64), 1))
rec("cudaStreamSynchronize", rt.cudaStreamSynchronize(None))
rec("cudaDeviceSynchronize", rt.cudaDeviceSynchronize())
rec("cudaLaunchKernel", rt.cudaLaunchKernel(ctypes.c_void_p(0x1000), Dim3(1, 1, 1), Dim3(32, 1, 1), None, ctypes.c_size_t(0), None))


class LaunchConfig(ctypes.Structure):
    """cudaLaunchConfig_t"""
    _fields_ = [("grid", Dim3), ("block", Dim3), ("shmem", ctypes.c_size_t), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


cfg = LaunchConfig(Dim3(2, 3, 1), Dim3(64, 1, 1), 256, None, None, 0)
rec("cudaLaunchKernelExC", rt.cudaLaunchKernelExC(ctypes.byref(cfg), ctypes.c_void_p(0x1000), None))
rec("cudaMallocAsync", rt.cudaMallocAsync(ctypes.byref(ptr), ctypes.c_size_t(8192), None))
rec("cudaMemsetAsync", rt.cudaMemsetAsync(ptr, 0, ctypes.c_size_t(8192), None))
rec("cudaEventQuery", rt.cudaEventQuery(None))
print("PID", os.getpid())
print("LIB", libs[0])
for name, v in rcs.items():
    print("RC", name, ",".join(str(x) for x in v))
sys.stdout.flush()
