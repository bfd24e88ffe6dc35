"""`python -m ddp_doctor_patient --out DIR ...`: one rank of the doctor's job (worker.py)."""

from __future__ import annotations

import os
import socket
import sys

from .worker import main

if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    code = main()
    # Skip the interpreter's teardown of ~2000 modules (sympy, dynamo: ~0.6 s per rank). Safe:
    # the journal is written unbuffered and the process group is already destroyed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
