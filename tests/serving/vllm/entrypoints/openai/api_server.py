"""A mock vLLM server for Causeway's serving tests: a real HTTP server exposing vLLM's metric
names on /metrics (its histograms with vLLM's bucket bounds), and an engine loop that drives
mock-cuda the way vLLM's model runner drives a GPU: a prefill-heavy step launches large grids
for the prompts it admits, a decode-heavy step small ones for one token of every running request;
each step ends with the sampled tokens copied back (a synchronous device-to-host copy).

Requests arrive every --arrival-ms. From --stall-at seconds the engine thread does on-CPU host
work for --stall-s seconds (a pure-Python loop: a detokenizer gone wrong) without a GPU call: the
planted slow period. Requests queue; when it ends their first tokens come late, which the TTFT
histogram shows.

Prints `prefill_steps N`, `decode_steps N`, `first_tokens N`, `stall_ns START END` (unix ns) for
the test to check against.

With --extension-dir DIR it first maps a file at DIR/vllm/_C.abi3.so (a copy of the C library's
libm), as a process importing vLLM maps vLLM's compiled extension: run by its file path instead of
`-m`, its command line no longer says vLLM, and the tracer must tell it by what it maps.

Usage: python3 -m vllm.entrypoints.openai.api_server --port P --libcudart PATH [--seconds S]
"""
import argparse
import ctypes
import http.server
import os
import shutil
import threading
import time

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
LABELS = 'engine="0",model_name="mock/llama-8b"'


class Histogram:
    def __init__(self, name, help_text, bounds):
        self.name, self.help, self.bounds = name, help_text, bounds
        self.counts = [0] * len(bounds)
        self.n, self.sum = 0, 0.0

    def observe(self, v):
        self.n += 1
        self.sum += v
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1

    def lines(self):
        out = ["# HELP %s %s" % (self.name, self.help), "# TYPE %s histogram" % self.name]
        for b, c in zip(self.bounds, self.counts):
            out.append('%s_bucket{%s,le="%s"} %d.0' % (self.name, LABELS, repr(b), c))
        out.append('%s_bucket{%s,le="+Inf"} %d.0' % (self.name, LABELS, self.n))
        out.append("%s_sum{%s} %r" % (self.name, LABELS, self.sum))
        out.append("%s_count{%s} %d.0" % (self.name, LABELS, self.n))
        return out


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             ITL_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             E2E_BUCKETS)
        self.running = self.waiting = 0
        self.kv = 0.0
        self.prompt_tokens = self.generation_tokens = 0

    def text(self):
        with self.lock:
            lines = []
            for name, kind, value in [
                ("vllm:num_requests_running", "gauge", self.running),
                ("vllm:num_requests_waiting", "gauge", self.waiting),
                ("vllm:kv_cache_usage_perc", "gauge", self.kv),
                ("vllm:prompt_tokens_total", "counter", self.prompt_tokens),
                ("vllm:generation_tokens_total", "counter", self.generation_tokens),
            ]:
                lines += ["# TYPE %s %s" % (name, kind), "%s{%s} %r" % (name, LABELS, float(value))]
            lines.append('vllm:cache_config_info{block_size="16",' + LABELS + '} 1.0')
            for h in (self.ttft, self.itl, self.e2e):
                lines += h.lines()
            return "\n".join(lines) + "\n"


def serve(port, metrics):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Gpu:
    """mock-cuda through ctypes: two registered kernels with simulated durations."""

    def __init__(self, libcudart):
        self.rt = ctypes.CDLL(libcudart)
        drv = ctypes.CDLL("libcuda.so.1")  # the one the runtime loaded
        self.rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_void_p]
        register_fatbin = getattr(self.rt, "__cudaRegisterFatBinary")
        register_fatbin.restype = ctypes.c_void_p
        register = getattr(self.rt, "__cudaRegisterFunction")
        register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int] + \
            [ctypes.c_void_p] * 5
        drv.mockcuSetKernelNs.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        handle = register_fatbin(None)
        self.stubs = {}
        for name, ns in [(b"flash_attn_varlen_prefill", 1_500_000), (b"paged_attention_v2_decode", 250_000)]:
            stub = ctypes.create_string_buffer(16)
            self.stubs[name] = stub
            register(handle, ctypes.addressof(stub), name, name, -1, None, None, None, None, None)
            drv.mockcuSetKernelNs(ctypes.addressof(stub), ns)
        self.dev = ctypes.c_void_p()
        assert self.rt.cudaMalloc(ctypes.byref(self.dev), ctypes.c_size_t(1 << 20)) == 0
        self.host = ctypes.create_string_buffer(64)

    def launch(self, name, grid):
        stub = ctypes.addressof(self.stubs[name])
        assert self.rt.cudaLaunchKernel(stub, dim3(grid, 1, 1), dim3(128, 1, 1), None, 0, None) == 0

    def sample(self):
        # the sampled token ids back to the host: waits for the step's kernels
        assert self.rt.cudaMemcpy(self.host, self.dev, ctypes.c_size_t(64), 2) == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--libcudart", required=True)
    ap.add_argument("--seconds", type=float, default=7.0)
    ap.add_argument("--arrival-ms", type=float, default=40.0)
    ap.add_argument("--stall-at", type=float, default=3.0)
    ap.add_argument("--stall-s", type=float, default=1.2)
    ap.add_argument("--extension-dir")
    args = ap.parse_args()
    if args.extension_dir:
        libm = next(line.split()[-1] for line in open("/proc/self/maps") if "/libm.so" in line)
        ext = os.path.join(args.extension_dir, "vllm", "_C.abi3.so")
        os.makedirs(os.path.dirname(ext), exist_ok=True)
        shutil.copyfile(libm, ext)
        ctypes.CDLL(ext)

    metrics = Metrics()
    gpu = Gpu(args.libcudart)
    server = serve(args.port, metrics)
    out_tokens, max_running, admit_per_step, prompt_len = 16, 32, 8, 64
    waiting, running = [], []  # arrival times; [arrival, tokens, last token time]
    prefill_steps = decode_steps = first_tokens = 0
    start = time.monotonic()
    next_arrival = start
    stall = None
    while True:
        now = time.monotonic()
        if now - start >= args.seconds:
            break
        while next_arrival <= now:
            waiting.append(next_arrival)
            next_arrival += args.arrival_ms / 1000.0
        if stall is None and now - start >= args.stall_at:
            stall_from = time.time_ns()
            spin_until = time.monotonic() + args.stall_s
            x = 0
            while time.monotonic() < spin_until:  # host work, on the CPU, no GPU call
                x = (x * 31 + 7) % 1000003
            stall = (stall_from, time.time_ns())
            continue
        admitted = waiting[:min(admit_per_step, max_running - len(running))]
        if admitted:
            del waiting[:len(admitted)]
            for _ in admitted:
                gpu.launch(b"flash_attn_varlen_prefill", 1024)
                gpu.launch(b"flash_attn_varlen_prefill", 1024)
            gpu.sample()
            done = time.monotonic()
            prefill_steps += 1
            with metrics.lock:
                for a in admitted:
                    metrics.ttft.observe(done - a)
                    running.append([a, 1, done])
                first_tokens += len(admitted)
                metrics.prompt_tokens += prompt_len * len(admitted)
                metrics.generation_tokens += len(admitted)
        elif running:
            for _ in range(4):
                gpu.launch(b"paged_attention_v2_decode", 32)
            gpu.sample()
            done = time.monotonic()
            decode_steps += 1
            with metrics.lock:
                for r in running:
                    metrics.itl.observe(done - r[2])
                    r[1] += 1
                    r[2] = done
                metrics.generation_tokens += len(running)
                for r in [r for r in running if r[1] >= out_tokens]:
                    metrics.e2e.observe(done - r[0])
                running = [r for r in running if r[1] < out_tokens]
        else:
            time.sleep(0.002)
        with metrics.lock:
            metrics.running, metrics.waiting = len(running), len(waiting)
            metrics.kv = sum(prompt_len + r[1] for r in running) / float(max_running * (prompt_len + out_tokens))
    # one more scrape interval with the final figures exposed, then stop serving
    time.sleep(0.6)
    server.shutdown()
    print("prefill_steps %d" % prefill_steps)
    print("decode_steps %d" % decode_steps)
    print("first_tokens %d" % first_tokens)
    if stall:
        print("stall_ns %d %d" % stall)


if __name__ == "__main__":
    main()
