"""Runs a command and prints the peak resident memory of that command alone, in bytes.

`python tests/peak_rss.py [--endless-stdin TEXT] ARGV...`: the command runs as this process's
only child, so RUSAGE_CHILDREN is its peak (Linux reports KiB). With --endless-stdin, TEXT is
written to its stdin until it stops reading.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading


def _write_forever(descriptor: int, text: bytes) -> None:
    block = text * max(1, (1 << 20) // len(text))
    try:
        while True:
            os.write(descriptor, block)
    except OSError:  # EPIPE: the command stopped reading
        pass
    finally:
        os.close(descriptor)


def main(argv: list[str]) -> int:
    stdin = None
    if argv[0] == "--endless-stdin":
        text, argv = argv[1].encode().decode("unicode_escape").encode(), argv[2:]
        stdin, writer = os.pipe()
        threading.Thread(target=_write_forever, args=(writer, text), daemon=True).start()
    process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL)
    if stdin is not None:
        os.close(stdin)  # the child holds the only read end: its exit ends the writer
    returncode = process.wait()
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"{returncode} {peak_kib * 1024}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
