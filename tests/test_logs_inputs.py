"""Every log a user has: compressed (gzip, xz, bzip2, zstd), not UTF-8, CRLF (issue 21, 3)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from pathlib import Path

import pytest
import zstandard

from ddp_doctor.logscan import scan_stream
from ddp_doctor.logscan.compressed import DecompressError, compression_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
COMPRESSORS = {
    "gzip": gzip.compress,
    "xz": lzma.compress,
    "bzip2": bz2.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


def codes_of(data: bytes, max_bytes: int | None = None) -> list[str]:
    return [f.code for f in scan_stream(io.BytesIO(data), "x", max_bytes).findings]


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
@pytest.mark.parametrize("fixture", ["nccl_warn_ib", "cuda_oom_two_nodes_slurm"])
def test_a_compressed_copy_gives_the_plain_files_findings(name: str, fixture: str) -> None:
    plain = (FIXTURES / f"{fixture}.log").read_bytes()
    packed = COMPRESSORS[name](plain)
    assert compression_of(packed[:10]) == name
    scan = scan_stream(io.BytesIO(packed), "x")
    assert scan.encoding.startswith(name)
    assert [f.code for f in scan.findings] == codes_of(plain)


def test_a_small_file_that_expands_without_limit_is_cut_at_the_cap() -> None:
    bomb = zstandard.ZstdCompressor().compress(b"step 1 ok\n" * 2_000_000)  # 20 MB of text
    assert len(bomb) < 100_000
    scan = scan_stream(io.BytesIO(bomb), "x", max_bytes=1 << 20)
    assert scan.truncated and scan.bytes == 1 << 20


def test_damaged_xz_data_is_an_oserror() -> None:
    packed = lzma.compress(b"x" * 100_000)
    damaged = packed[:12] + bytes(64) + packed[76:]
    with pytest.raises((OSError, EOFError)):
        scan_stream(io.BytesIO(damaged), "x")
    assert issubclass(DecompressError, OSError)


def test_a_gbk_log_is_decoded_by_detection() -> None:
    prose = "训练在第三个周期失败了，下面是完整的错误信息和环境说明。\n" * 40
    text = prose + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    scan = scan_stream(io.BytesIO(text.encode("gbk")), "x")
    assert scan.encoding in ("gb18030", "gbk", "gb2312", "big5", "hz", "cp936")
    assert [f.code for f in scan.findings] == ["DDP512"]


def test_crlf_lines_read_like_lf_lines() -> None:
    plain = (FIXTURES / "nccl_warn_ib.log").read_bytes()
    assert codes_of(plain.replace(b"\n", b"\r\n")) == codes_of(plain)
