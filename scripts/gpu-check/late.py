#!/usr/bin/env python3
"""Late attach, for Causeway's GPU acceptance run (scripts/gpu-check.sh): a process that maps no CUDA
library when it starts, sleeps, then imports torch (libcudart mapped) and initialises CUDA (libcuda
mapped, first cudaMalloc of the caching allocator). It prints when each happened and how many
cudaMalloc calls the caching allocator made (segment.all.allocated), so the script can tell whether
the tracer attached in time for the first one.
"""

import os
import sys
import time

print("PID", os.getpid(), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3.0)
t = time.time_ns()
import torch  # noqa: E402 - importing late is the point

print("T_IMPORT", t, time.time_ns(), flush=True)
t = time.time_ns()
x = torch.ones(1, device="cuda")
torch.cuda.synchronize()
print("T_FIRST_CUDA", t, time.time_ns(), flush=True)
a = torch.randn(512, 512, device="cuda")
b = torch.randn(512, 512, device="cuda")
s = (a @ b).sum().item()
big = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # a second segment: another cudaMalloc
torch.cuda.synchronize()
st = torch.cuda.memory_stats()
print("SEGMENTS", st.get("segment.all.allocated", -1), flush=True)
print("DONE", flush=True)
