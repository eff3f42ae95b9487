"""Calls the real NCCL of the PyPI wheel nvidia-nccl-cu12 (nvidia/nccl/lib/libnccl.so.2) through
ctypes: what works without a GPU, N ncclGroupStart / ncclGroupEnd pairs and ncclGetUniqueId,
printing `PID <pid>`, `VERSION <n>` and `RC <name> <rc>,...`. Used by probes/tests/real_libnccl.rs."""
import ctypes
import glob
import os
import sys

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
libs = glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2"))
if not libs:
    print("NOLIB")
    sys.exit(3)
print(f"PID {os.getpid()}", flush=True)
nccl = ctypes.CDLL(libs[0])
version = ctypes.c_int()
nccl.ncclGetVersion(ctypes.byref(version))
print(f"VERSION {version.value}")
rcs = {"ncclGroupStart": [], "ncclGroupEnd": []}
for _ in range(N):
    rcs["ncclGroupStart"].append(nccl.ncclGroupStart())
    rcs["ncclGroupEnd"].append(nccl.ncclGroupEnd())
uid = (ctypes.c_char * 128)()
print(f"RC ncclGetUniqueId {nccl.ncclGetUniqueId(uid)}")
for name, v in rcs.items():
    print(f"RC {name} {','.join(map(str, v))}")
