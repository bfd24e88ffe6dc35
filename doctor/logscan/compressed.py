"""Compressed logs (gzip, xz, bzip2, zstd) and logs in another encoding than UTF-8, read as a
stream of UTF-8 bytes. Decompression streams: memory stays flat, and what is scanned is bounded
by the reader's byte cap on the decompressed text, so a small file that expands without limit
(a "zip bomb") is cut there, not read to its end."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import BinaryIO

_MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_BZIP2_BLOCK = b"1AY&SY"  # every bzip2 stream: "BZh" + level + this block magic
FORMATS = ("gzip", "xz", "bzip2", "zstd")
DETECT_BYTES = 64 * 1024


class DecompressError(OSError):
    """The compressed data is damaged or ends early."""


def compression_of(head: bytes) -> str | None:
    """The format the first bytes announce, or None for plain data."""
    for magic, name in _MAGICS:
        if head.startswith(magic):
            return name
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] == _BZIP2_BLOCK:
        return "bzip2"
    return None


def decompressed(stream: BinaryIO, name: str) -> BinaryIO:
    """A stream of the decompressed bytes (read lazily, chunk by chunk); damaged data raises
    DecompressError (an OSError), data that ends early EOFError."""
    return _Guarded(_opened(stream, name), name)  # type: ignore[return-value]


class _Guarded:
    """Turns each decompressor's own error type into DecompressError."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._stream, self._name = stream, name

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except (EOFError, OSError):
            raise
        except Exception as error:  # lzma.LZMAError, zstandard.ZstdError
            raise DecompressError(f"damaged {self._name} data: {error}") from None


def _opened(stream: BinaryIO, name: str) -> BinaryIO:
    """Each decompressor is imported only for a log that needs it (start-up stays short)."""
    if name == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[return-value]
    if name == "xz":
        import lzma

        return lzma.LZMAFile(stream)  # type: ignore[return-value]
    if name == "bzip2":
        import bz2

        return bz2.BZ2File(stream)  # type: ignore[return-value]
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)


def detected_encoding(sample: bytes) -> str | None:
    """The encoding of bytes that are not UTF-8 (charset-normalizer on the first 64 KiB), or
    None when they are UTF-8 or nothing better is found."""
    try:
        sample.decode("utf-8")
        return None
    except UnicodeDecodeError as error:
        if error.start >= len(sample) - 3:  # a character cut by the sample's end
            return None
    from charset_normalizer import from_bytes  # only for logs that are not UTF-8

    best = from_bytes(sample[:DETECT_BYTES]).best()
    name = best.encoding if best is not None else None
    return None if name in (None, "utf_8", "ascii") else name


def as_utf8(chunks: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """Re-encodes a stream of `encoding` bytes as UTF-8, one chunk at a time."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    for chunk in chunks:
        yield decoder.decode(chunk).encode("utf-8")
    yield decoder.decode(b"", final=True).encode("utf-8")
