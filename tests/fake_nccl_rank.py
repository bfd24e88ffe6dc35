"""A stand-in for an NCCL rank's documented debugging endpoints, for attach's tests on a
machine without GPUs: the flight-recorder dump pipe (ProcessGroupNCCL's DumpPipe: a FIFO
`${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}${rank}.pipe` read without blocking; anything written makes
the rank dump to `${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}${rank}`), and on request NCCL's RAS
client port (protocol 2 of NVIDIA/nccl src/ras/client.cc). It serves the files of
fixtures/attach/flight_recorder and fixtures/attach/ras, and runs until it is killed.

Usage: python fake_nccl_rank.py RANK RAS_PORT(0: none) READY_FILE
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


def main() -> None:
    rank, ras_port, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if ras_port:
        threading.Thread(target=serve_ras, args=(ras_port,), daemon=True).start()
        time.sleep(0.2)
    threading.Thread(target=watch_pipe, args=(rank,), daemon=True).start()
    Path(ready).write_text("ready\n")
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
