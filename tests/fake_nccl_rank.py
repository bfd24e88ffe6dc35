"""A stand-in for an NCCL rank's documented debugging endpoints, for attach's tests on a
machine without GPUs: the flight-recorder dump pipe (ProcessGroupNCCL's DumpPipe: a FIFO
`${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}${rank}.pipe` read without blocking; anything written makes
the rank dump to `${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}${rank}`), and on request NCCL's RAS
client port (protocol 2 of NVIDIA/nccl src/ras/client.cc), and on request torch's debug
server frontend in a child process (torch/distributed/debug/_frontend.py: /fr_trace_json, one
`<h2>Rank N: ADDR</h2><pre>JSON</pre>` per rank). It serves the files of
fixtures/attach/flight_recorder and fixtures/attach/ras, and runs until it is killed.

Usage: python fake_nccl_rank.py RANK RAS_PORT READY_FILE [DEBUG_PORT]   (a port 0: none)
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "attach"


def serve_ras(port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    report = (FIXTURES / "ras" / "one_missing.json").read_bytes()
    while True:
        connection, _ = listener.accept()
        with connection, connection.makefile("rwb") as stream:
            for line in stream:
                words = line.decode().strip().upper()
                if words.startswith("CLIENT PROTOCOL"):
                    stream.write(b"SERVER PROTOCOL 2\n")
                elif words.startswith(("SET FORMAT", "TIMEOUT")):
                    stream.write(b"OK\n")
                elif words.endswith("STATUS"):
                    stream.write(report)
                    stream.flush()
                    break
                stream.flush()


def watch_pipe(rank: int) -> None:
    pipe = f"{os.environ['TORCH_NCCL_DEBUG_INFO_PIPE_FILE']}{rank}.pipe"
    dump = f"{os.environ['TORCH_NCCL_DEBUG_INFO_TEMP_FILE']}{rank}"
    os.mkfifo(pipe, 0o666)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    while True:
        try:
            asked = os.read(reader, 64)
        except BlockingIOError:
            asked = b""
        if asked:
            shutil.copyfile(FIXTURES / "flight_recorder" / f"rank{rank}.json", dump)
        time.sleep(0.05)


def serve_frontend(port: int) -> None:
    from http.server import BaseHTTPRequestHandler, HTTPServer

    blocks = "".join(
        f"<h2>Rank {rank}: http://node0:4{rank}00</h2>\n<pre>"
        + (FIXTURES / "flight_recorder" / f"rank{rank}.json").read_text()
        + "</pre>\n"
        for rank in (0, 1)
    )
    page = f"<!doctype html><body><h1>FlightRecorder</h1>{blocks}</body>".encode()

    class Frontend(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path.split("?")[0] == "/fr_trace_json"
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(page if found else b"not found")

        def log_message(self, *args: object) -> None:
            pass

    HTTPServer(("127.0.0.1", port), Frontend).serve_forever()


def main() -> None:
    rank, ras_port, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    debug_port = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if debug_port:  # as torch does, the frontend is a multiprocessing.Process of rank 0
        import multiprocessing

        multiprocessing.get_context("fork").Process(
            target=serve_frontend, args=(debug_port,), daemon=True
        ).start()
        time.sleep(0.5)
    if ras_port:
        threading.Thread(target=serve_ras, args=(ras_port,), daemon=True).start()
        time.sleep(0.2)
    threading.Thread(target=watch_pipe, args=(rank,), daemon=True).start()
    Path(ready).write_text("ready\n")
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
