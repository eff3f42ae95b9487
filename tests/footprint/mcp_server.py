#!/usr/bin/env python3
"""A small MCP server over stdio, standard library only, for `cli/tests/footprint.rs`: what
`causeway trace --footprint` sees it touch. One JSON-RPC message per line on stdin, one answer
per line on stdout. Its tools:

- `query`: opens the SQLite database file given with --db, creates a table, inserts a row, counts
  the rows (the file, its journal, the bytes);
- `fetch`: opens a TCP connection to 127.0.0.1:--port, sends "ping\\n", reads the answer (a socket
  and its peer);
- `run`: runs `echo hello` in a subprocess (a child and what it ran).

It exits at the end of its input."""

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys

TOOLS = [
    {"name": "query", "description": "Insert a row and count them", "inputSchema": {"type": "object"}},
    {"name": "fetch", "description": "Ask the peer", "inputSchema": {"type": "object"}},
    {"name": "run", "description": "Run echo in a subprocess", "inputSchema": {"type": "object"}},
]


def call(args, name):
    if name == "query":
        con = sqlite3.connect(args.db)
        con.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes (body) VALUES (?)", ("x" * 1000,))
        con.commit()
        (n,) = con.execute("SELECT count(*) FROM notes").fetchone()
        con.close()
        return f"{n} rows"
    if name == "fetch":
        with socket.create_connection(("127.0.0.1", args.port)) as s:
            s.sendall(b"ping\n")
            return s.makefile("rb").readline().decode().strip()
    if name == "run":
        return subprocess.run(["echo", "hello"], capture_output=True, text=True, check=True).stdout.strip()
    raise ValueError(f"no tool {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification: no answer
        method = msg.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "footprint-test", "version": "1", "pid": os.getpid()},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            text = call(args, msg["params"]["name"])
            result = {"content": [{"type": "text", "text": text}]}
        else:
            out = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}}
            stdout.write(json.dumps(out).encode() + b"\n")
            stdout.flush()
            continue
        stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    main()
