"""A training step whose backward pass runs on a native engine thread, the way PyTorch's autograd
launches the backward kernels on its device thread while the Python thread waits in
`loss.backward()`: mock-cuda's `libengine.so` (through ctypes) launches a seed kernel on the
calling thread, then a worker thread that runs no Python launches while the caller waits for it.
Traced by `cli/tests/borrowed_stacks.rs`, which finds the lines by their `# @tag`.

argv: the runtime (mock-cuda's libcudart.so.12), libengine.so, and the mode:
  single  the main thread waits in backward(); a bystander thread that made a call of its own
          sleeps in time.sleep meanwhile (asleep too, but nothing links it to the worker);
  shared  two Python threads both wait for the same worker: either could have asked for it.
Prints `PYTHREAD <name> <tid>` for each Python thread, the worker `THREAD engine-worker <tid>`."""
import ctypes
import os
import sys
import threading
import time

rt = ctypes.CDLL(sys.argv[1])
engine = ctypes.CDLL(sys.argv[2])
ROUNDS = 20


def say(name):
    # one write of the whole line: two threads saying it at once must not interleave (print writes
    # the text and the newline apart)
    sys.stdout.flush()
    os.write(1, f"PYTHREAD {name} {threading.get_native_id()}\n".encode())


def malloc(size):
    p = ctypes.c_void_p()
    return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size))  # @malloc


def forward():
    return malloc(1 << 20)  # @forward


def backward():
    return engine.engine_backward(ROUNDS)  # @backward


def backward_shared():
    return engine.engine_backward_shared(ROUNDS)  # @backward_shared


def optimizer_step():
    return malloc(1 << 16)  # @optimizer_step


def bystander():
    say("bystander")
    malloc(4096)  # @bystander_malloc
    time.sleep(2.0)  # @bystander_sleep


def waiter(name):
    say(name)
    assert backward_shared() == 0  # @waiter


def single():
    say("main")
    t = threading.Thread(target=bystander)
    t.start()
    time.sleep(0.2)
    forward()  # @main_forward
    assert backward() == 0  # @main_backward
    optimizer_step()  # @main_step
    t.join()


def shared():
    ts = [threading.Thread(target=waiter, args=(f"waiter{i}",)) for i in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


{"single": single, "shared": shared}[sys.argv[3]]()
print("DONE", flush=True)
