"""Log diagnosis: one table of known texts (patterns.py), streamed through in bounded memory.

`ddp-doctor logs FILE` and the job probes both call scan_text / scan_lines / scan_file, which
return findings root cause first.
"""

from ddp_doctor.logscan.reader import LogScan, scan_stream
from ddp_doctor.logscan.scanner import LogScanner, ScanStats, scan_file, scan_lines, scan_text

__all__ = [
    "LogScan",
    "LogScanner",
    "ScanStats",
    "scan_file",
    "scan_lines",
    "scan_stream",
    "scan_text",
]
