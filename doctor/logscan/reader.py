"""Reads a log stream of any shape into the scanner: plain, gzip/xz/bzip2/zstd, UTF-16 with a BOM (what
Windows PowerShell's `>` writes), and says what its first bytes looked like."""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from ddp_doctor.logscan.compressed import (
    DETECT_BYTES,
    as_utf8,
    compression_of,
    decompressed,
    detected_encoding,
)
from ddp_doctor.logscan.scanner import READ_BYTES, LogScanner
from ddp_doctor.model import Finding

SAMPLE_BYTES = 64 * 1024
_TEXT_CONTROLS = set(b"\t\n\r\f\b\x1b")


@dataclass(frozen=True)
class LogScan:
    findings: list[Finding]
    bytes: int  # bytes of text scanned (after gzip / UTF-16 decoding)
    lines: int
    encoding: str  # how it was read: "utf-8", "utf-16", "xz+utf-8", "gzip+cp1252" ...
    looks_binary: bool  # NUL bytes or mostly control bytes at the start
    invalid_utf8: bool  # the start is not valid UTF-8 (read with replacement characters)
    truncated: bool = False  # stopped at max_bytes of text before the stream ended
    skipped_bytes: int = 0  # read from this offset on (a file over its cap: its last part)
    facts_read: Mapping[str, int | str] = field(default_factory=dict)  # fact -> its line


def scan_stream(
    stream: BinaryIO, source: str | None = None, max_bytes: int | None = None
) -> LogScan:
    """Scans a binary stream to its end, or to `max_bytes` of text (after gzip and UTF-16
    decoding); raises OSError/EOFError when it cannot be read."""
    scanner = LogScanner(source)
    read = read_into(scanner, stream, max_bytes)
    return LogScan(
        findings=scanner.findings(),
        bytes=scanner.stats.bytes,
        lines=scanner.stats.lines,
        encoding=read.encoding,
        looks_binary=read.looks_binary,
        invalid_utf8=read.invalid_utf8,
        truncated=read.truncated,
        facts_read=scanner.log_facts.lines(),
    )


@dataclass(frozen=True)
class StreamRead:
    encoding: str
    looks_binary: bool
    invalid_utf8: bool
    truncated: bool = False  # stopped at max_bytes


def read_into(scanner: LogScanner, stream: BinaryIO, max_bytes: int | None = None) -> StreamRead:
    """Feeds a stream (gzip, UTF-16 or UTF-8) to the scanner, to its end or to `max_bytes` of
    text; says how it read it."""
    readable, encoding = _decompressed(_peekable(stream))
    chunks = _text_chunks(readable, encoding)
    sample = b""
    truncated = False
    for chunk in chunks:
        if max_bytes is not None and scanner.stats.bytes + len(chunk) > max_bytes:
            chunk = chunk[: max_bytes - scanner.stats.bytes]
            truncated = True
        if len(sample) < SAMPLE_BYTES:
            sample += chunk[: SAMPLE_BYTES - len(sample)]
        scanner.feed(chunk)
        if truncated:
            break
    return StreamRead("+".join(encoding), looks_binary(sample), not _valid_utf8(sample), truncated)


def _decompressed(readable: io.BufferedReader) -> tuple[io.BufferedReader, list[str]]:
    """gzip, xz, bzip2 or zstd data, decompressed as it is read (compressed.py)."""
    name = compression_of(readable.peek(10)[:10])
    if name is None:
        return readable, []
    return _peekable(decompressed(readable, name)), [name]


def _text_chunks(readable: io.BufferedReader, encoding: list[str]) -> Iterator[bytes]:
    """UTF-8 chunks of the text: UTF-16 by its BOM, another encoding by detection."""
    head = readable.peek(4)[:4]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding.append("utf-16")
        return _utf16_as_utf8(readable)
    detected = detected_encoding(readable.peek(DETECT_BYTES)[:DETECT_BYTES])
    encoding.append(detected or "utf-8")
    chunks = _chunks(readable, skip_bom=True)
    return as_utf8(chunks, detected) if detected else chunks


def looks_binary(sample: bytes) -> bool:
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    controls = sum(1 for byte in sample if byte < 0x20 and byte not in _TEXT_CONTROLS)
    return controls > len(sample) // 10


def _valid_utf8(sample: bytes) -> bool:
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start >= len(sample) - 3  # a character cut by the sample's end is fine
    return True


def _peekable(stream: BinaryIO) -> io.BufferedReader:
    if isinstance(stream, io.BufferedReader):
        return stream
    return io.BufferedReader(_RawAdapter(stream), buffer_size=READ_BYTES)


class _RawAdapter(io.RawIOBase):
    """Lets io.BufferedReader wrap any object with read() (BytesIO, GzipFile, a pipe)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _chunks(stream: io.BufferedReader, skip_bom: bool) -> Iterator[bytes]:
    if skip_bom and stream.peek(3)[:3] == codecs.BOM_UTF8:
        stream.read(3)
    while chunk := stream.read(READ_BYTES):
        yield chunk


def _utf16_as_utf8(stream: io.BufferedReader) -> Iterator[bytes]:
    decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")  # reads the BOM
    for chunk in _chunks(stream, skip_bom=False):
        yield decoder.decode(chunk).encode("utf-8")
    yield decoder.decode(b"", final=True).encode("utf-8")


def skip_to_line_start(stream: BinaryIO, limit: int) -> None:
    """Moves a stream that was positioned inside a line to the start of the next one, reading
    at most `limit` bytes in pieces (a cut inside a line of gigabytes never reads it whole;
    past the limit the scan starts mid-line, as the scanner reads an endless line in pieces)."""
    start = stream.tell()
    read = 0
    while read < limit:
        piece = stream.read(min(READ_BYTES, limit - read))
        if not piece:
            return
        newline = piece.find(b"\n")
        if newline >= 0:
            stream.seek(start + read + newline + 1)
            return
        read += len(piece)
