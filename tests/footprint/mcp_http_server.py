#!/usr/bin/env python3
"""A small MCP server over streamable HTTP, standard library only (http.server), for
`cli/tests/footprint_http.rs`: what `causeway trace --footprint` sees it touch, request by request.
Each JSON-RPC message is POSTed to /mcp and answered with one JSON body (HTTP/1.1, keep-alive).
Its tools are the stdio server's (`mcp_server.py`: `query` writes an SQLite database file, `fetch`
asks a TCP peer, `run` starts `echo` in a subprocess); each call also appends a line to the log file
given with --log, opened at the start (a descriptor a server holds from before an attach).

It says `listening PORT` on stdout once it accepts connections, and exits at the end of its stdin."""

import argparse
import http.server
import json
import os
import sys
import threading

from mcp_server import TOOLS, call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--port", type=int, required=True, help="the TCP peer `fetch` asks")
    p.add_argument("--log", required=True)
    args = p.parse_args()
    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def do_POST(self):
            msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            method = msg.get("method")
            if "id" not in msg:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if method == "initialize":
                result = {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "footprint-http-test", "version": "1", "pid": os.getpid()},
                }
            elif method == "tools/list":
                result = {"tools": TOOLS}
            elif method == "tools/call":
                name = msg["params"]["name"]
                result = {"content": [{"type": "text", "text": call(args, name)}]}
                os.write(log, f"called {name}\n".encode())
            else:
                result = None
            out = {"jsonrpc": "2.0", "id": msg["id"]}
            if result is None:
                out["error"] = {"code": -32601, "message": "no such method"}
            else:
                out["result"] = result
            body = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.buffer.read()  # until the test closes it
    os._exit(0)


if __name__ == "__main__":
    main()
