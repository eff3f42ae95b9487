"""A training loop on mock-cuda (argv[1]: its libcudart) for the steps tests: each step queues GPU
work (a memset of simulated duration), does a little host work, copies a scalar back (loss.item())
and synchronizes. Steps SLOW_FIRST..SLOW_LAST stall on the host first (a data loader that sleeps),
the planted slow range. With "label" (argv[2]) every step is labeled through the repository's
helper (python/causeway.py); with "nolabel" the tracer must find the steps itself.

Prints `steps N`, `slow FIRST LAST` and `labeled yes|no` for the test to check against."""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import causeway  # noqa: E402

STEPS = 60
SLOW_FIRST, SLOW_LAST = 30, 37
STALL_S = 0.080

rt = ctypes.CDLL(sys.argv[1])
label = len(sys.argv) > 2 and sys.argv[2] == "label"

dev = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) == 0
host = ctypes.create_string_buffer(8)


def step(i):
    if SLOW_FIRST <= i <= SLOW_LAST:
        time.sleep(STALL_S)  # the data loader stalls
    assert rt.cudaMemsetAsync(dev, 0, ctypes.c_size_t(1 << 20), None) == 0
    time.sleep(0.008)  # host work while the GPU runs
    assert rt.cudaMemcpy(host, dev, ctypes.c_size_t(8), 2) == 0  # device to host: loss.item()
    assert rt.cudaStreamSynchronize(None) == 0


for i in range(STEPS):
    if label:
        with causeway.step(i):
            step(i)
    else:
        step(i)

print("steps %d" % STEPS)
print("slow %d %d" % (SLOW_FIRST, SLOW_LAST))
print("labeled %s" % ("yes" if label else "no"))
sys.stdout.flush()
