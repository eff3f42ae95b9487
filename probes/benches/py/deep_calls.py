"""The uprobe bench's Python workload (probes/benches/uprobe_overhead.rs, part `python`): recurse to
a given depth of Python frames, then call the CUDA runtime (argv[1], mock-cuda's libcudart) through
ctypes in a loop, so that every call has a Python stack of that depth for the tracer to walk.

usage: deep_calls.py LIBCUDART ITERS DEPTH"""
import ctypes
import sys

rt = ctypes.CDLL(sys.argv[1])
iters, depth = int(sys.argv[2]), int(sys.argv[3])
free = rt.cudaFree


def calls(n):
    for _ in range(n):
        free(None)


def down(d):
    if d <= 1:
        return calls(iters)
    return down(d - 1)


# the module frame and `calls` add two frames to the `down` chain
down(max(depth - 2, 1))
print("CALLS", iters)
