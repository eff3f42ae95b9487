"""A GPU feeding loop that fetches every batch over TCP, and the server it fetches from: the
workload of the network tests (cli/tests/network.rs).

    python3 feeder.py serve [--delay-steps A-B] [--delay-ms D]
        Listens on 127.0.0.1 (a free port, printed as `port P`), serves one client: for each
        4-byte request (the step number) it sends a batch of BATCH bytes back; the steps in A-B
        are answered D ms late (the planted slow peer). Run untraced: it is the peer.

    python3 feeder.py feed --port P --libcudart PATH [--steps N] [--upload BYTES]
        Connects, and for each step sends its request (the step number, then BYTES of results
        the server reads and drops: the traced side's own bulk sends), receives the batch (a
        blocking recv: the thread sleeps in the socket call until the batch arrives), copies it
        to the GPU (mock-cuda's cudaMemcpy) and synchronizes. Prints `connected` and `steps N`.
"""

import argparse
import ctypes
import socket
import struct
import sys
import time

BATCH = 256 << 10


def serve(args):
    lo, hi = (int(x) for x in args.delay_steps.split("-")) if args.delay_steps else (-1, -2)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    print(f"port {srv.getsockname()[1]}", flush=True)
    conn, _ = srv.accept()
    payload = b"\x5a" * BATCH
    while True:
        req = recv_exactly(conn, 8)
        if req is None:
            break
        step, upload = struct.unpack("<II", req)
        if upload and recv_exactly(conn, upload) is None:
            break
        if lo <= step <= hi:
            time.sleep(args.delay_ms / 1000.0)
        conn.sendall(payload)
    conn.close()


def recv_exactly(sock, n):
    """n bytes from sock, or None at the end of the stream."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            return None
        got += k
    return bytes(buf)


def feed(args):
    rt = ctypes.CDLL(args.libcudart)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dev = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(dev), BATCH) != 0:
        sys.exit("cudaMalloc failed")
    sock = socket.create_connection(("127.0.0.1", args.port))
    print("connected", flush=True)
    host = ctypes.create_string_buffer(BATCH)
    results = b"\xa5" * args.upload
    for step in range(args.steps):
        sock.sendall(struct.pack("<II", step, args.upload) + results)
        batch = recv_exactly(sock, BATCH)
        if batch is None:
            sys.exit(f"the server closed the stream at step {step}")
        ctypes.memmove(host, batch, BATCH)
        rt.cudaMemcpy(dev, host, BATCH, 1)  # cudaMemcpyHostToDevice
        rt.cudaDeviceSynchronize()
    sock.close()
    print(f"steps {args.steps}", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--delay-steps", default="")
    s.add_argument("--delay-ms", type=float, default=0.0)
    f = sub.add_parser("feed")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--libcudart", required=True)
    f.add_argument("--steps", type=int, default=200)
    f.add_argument("--upload", type=int, default=0)
    args = p.parse_args()
    serve(args) if args.mode == "serve" else feed(args)


if __name__ == "__main__":
    main()
