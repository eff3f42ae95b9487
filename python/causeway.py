"""Label a traced workload's steps, epochs and tasks for Causeway.

    import causeway

    for i, batch in enumerate(loader):
        with causeway.step(i):
            train_step(batch)

Each finished interval is one line of JSON sent over the Unix socket `causeway trace` opens (its
path is in $CAUSEWAY_LABELS for a command the trace launched; otherwise the trace's default path).
Times are CLOCK_MONOTONIC nanoseconds, the clock of the trace's probes. When no trace is listening
the labels cost one failed connect per second at most and nothing else: the workload never fails
because it is not traced. Python 3.6 or newer, standard library only.
"""

import contextlib
import json
import os
import socket
import sys
import threading
import time

__all__ = ["step", "epoch", "task", "label", "socket_path"]

_lock = threading.Lock()
_sock = None
_retry_at = 0.0


def socket_path():
    """Where labels go: $CAUSEWAY_LABELS, else the trace's default path for this user."""
    path = os.environ.get("CAUSEWAY_LABELS")
    if path:
        return path
    uid = os.geteuid()
    if uid == 0:
        return "/run/causeway/labels.sock"
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return os.path.join(run, "causeway", "labels.sock")
    return "/tmp/causeway-%d/labels.sock" % uid


if hasattr(time, "monotonic_ns"):
    _now_ns = time.monotonic_ns
else:  # Python 3.6

    def _now_ns():
        return int(time.monotonic() * 1e9)


def _tid():
    if hasattr(threading, "get_native_id"):
        return threading.get_native_id()
    try:  # Python < 3.8: gettid(2) through libc
        import ctypes

        nr = {"x86_64": 186, "aarch64": 178, "ppc64le": 207}.get(os.uname().machine)
        if nr is not None:
            return ctypes.CDLL(None, use_errno=True).syscall(nr)
    except Exception:
        pass
    return os.getpid()


def _send(message):
    """Send one label; False when no trace is listening (retried at most once a second)."""
    global _sock, _retry_at
    line = (json.dumps(message, separators=(",", ":")) + "\n").encode()
    with _lock:
        if _sock is None:
            if time.monotonic() < _retry_at:
                return False
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(socket_path())
                _sock = s
            except OSError:
                _retry_at = time.monotonic() + 1.0
                return False
        try:
            _sock.sendall(line)
            return True
        except OSError:
            _sock.close()
            _sock = None
            _retry_at = time.monotonic() + 1.0
            return False


def label(kind, index, begin_ns, end_ns):
    """Record an interval that already happened: `kind` is "step", "epoch" or "task", the times are
    CLOCK_MONOTONIC nanoseconds (time.monotonic_ns())."""
    if kind not in ("step", "epoch", "task"):
        raise ValueError("kind must be step, epoch or task, not %r" % (kind,))
    return _send(
        {
            "kind": kind,
            "index": int(index),
            "begin_ns": int(begin_ns),
            "end_ns": int(end_ns),
            "pid": os.getpid(),
            "tid": _tid(),
        }
    )


@contextlib.contextmanager
def _interval(kind, index):
    begin = _now_ns()
    try:
        yield
    finally:
        label(kind, index, begin, _now_ns())


def step(index):
    """`with causeway.step(i):` labels training step (or serving iteration) `i`."""
    return _interval("step", index)


def epoch(index):
    """`with causeway.epoch(e):` labels epoch `e`."""
    return _interval("epoch", index)


def task(index):
    """`with causeway.task(n):` labels task `n` (a request, an evaluation, a checkpoint)."""
    return _interval("task", index)


if __name__ == "__main__":
    sys.stderr.write("import causeway and wrap steps in `with causeway.step(i):`\n")
    sys.exit(2)
