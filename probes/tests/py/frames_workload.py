"""Calls the CUDA runtime (argv[1], mock-cuda's libcudart) through ctypes from known functions and
lines: nested calls, a loop, a generator, an async task and two threads, each with its own
cudaMalloc size so the test can tell the calls apart. Every call line carries a `# @tag`; the test
(probes/tests/python_frames.rs) reads the lines of the tags from this file and asserts the exact
Python stack of each call. Keep each call on one line."""
import asyncio
import ctypes
import sys
import threading

rt = ctypes.CDLL(sys.argv[1])


def malloc(size):
    p = ctypes.c_void_p()
    return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size))  # @malloc


def inner():
    return malloc(1001)  # @inner


def outer():
    return inner()  # @outer


def loop():
    for _ in range(3):
        malloc(1002)  # @loop


def gen():
    yield malloc(1003)  # @gen


def use_gen():
    return list(gen())  # @use_gen


async def task():
    await asyncio.sleep(0)
    return malloc(1004)  # @task


def run_async():
    return asyncio.run(task())  # @run_async


def worker(size):
    malloc(size)  # @worker


def threads():
    ts = [threading.Thread(target=worker, args=(s,)) for s in (1005, 1006)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main():
    outer()  # @main_outer
    loop()  # @main_loop
    use_gen()  # @main_gen
    run_async()  # @main_async
    threads()  # @main_threads


main()  # @module
print("DONE")
