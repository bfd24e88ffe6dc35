"""Inside the patient: what `python -m torch.utils.collect_env` reports that the other probes
do not, read without importing torch, so a report needs no second paste.

Run as `python -m ddp_doctor_patient.collect_env`; prints one JSON object. The toolchain (gcc,
clang, cmake, nvcc), the OS and libc, the Python build, the CPU (lscpu on Linux: model, flags,
NUMA nodes, caches), the pip packages matching torch's own list (read with importlib.metadata,
as `pip list` would show them) and the conda packages matching it (from conda-meta), and the
allocator variables. Every command has a short timeout; what could not be read is None.
The package name lists are torch's (pytorch/pytorch torch/utils/collect_env.py, 2.13).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any

COMMAND_TIMEOUT_S = 5.0
PIP_PATTERNS = (
    "mypy", "flake8", "onnx", "torch", "numpy", "triton", "optree",
    "cuda-cudart", "cuda-cupti", "cuda-libraries", "cuda-opencl", "cuda-nvrtc", "cuda-runtime",
    "cublas", "cudnn", "cufft", "curand", "cusolver", "cusparse", "nccl", "nvjitlink", "nvtx",
    "dpcpp-cpp-rt", "intel-cmplr-lib-rt", "intel-cmplr-lib-ur", "intel-cmplr-lic-rt",
    "intel-opencl-rt", "intel-sycl-rt", "mkl", "onemkl-sycl-blas", "onemkl-sycl-dft",
    "onemkl-sycl-lapack", "onemkl-sycl-rng", "onemkl-sycl-sparse", "intel-openmp", "tbb",
    "impi-rt", "impi-devel", "oneccl", "oneccl-devel", "intel-pti", "umf", "tcmlib",
)  # fmt: skip
CONDA_PATTERNS = (
    "torch", "numpy", "triton", "optree", "cudatoolkit", "soumith", "mkl", "magma",
    "cuda-cudart", "cublas", "cudnn", "cufft", "curand", "cusolver", "cusparse", "nccl",
    "nvjitlink", "nvtx",
)  # fmt: skip
ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "CUDA_MODULE_LOADING")
VERSION_COMMANDS = {
    "gcc": (["gcc", "--version"], r"gcc (.*)"),
    "clang": (["clang", "--version"], r"clang version (.*)"),
    "cmake": (["cmake", "--version"], r"cmake (.*)"),
    "nvcc": (["nvcc", "--version"], r"release .+ V(.*)"),
}


def describe() -> dict[str, Any]:
    facts: dict[str, Any] = {name: _version(*spec) for name, spec in VERSION_COMMANDS.items()}
    facts.update(
        os=_os(),
        libc="-".join(part for part in platform.libc_ver() if part) or None,
        python_build=f"{sys.version.replace(chr(10), ' ')} ({sys.maxsize.bit_length() + 1}-bit runtime)",
        python_platform=platform.platform(),
        pip_packages=_pip_packages(),
        conda_packages=_conda_packages(),
        allocator=_allocator(),
    )
    facts.update(_cpu())
    return facts


def _run(words: list[str]) -> str | None:
    if shutil.which(words[0]) is None:
        return None
    try:
        done = subprocess.run(
            words,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(words: list[str], pattern: str) -> str | None:
    out = _run(words)
    found = re.search(pattern, out or "")
    return found.group(1).strip() if found else None


def _os() -> str | None:
    system = platform.system()
    if system == "Darwin":
        return f"macOS {platform.mac_ver()[0]} ({platform.machine()})"
    if system == "Windows":
        return f"{platform.system()} {platform.release()} ({platform.version()})"
    description = None
    out = _run(["lsb_release", "-a"])
    found = re.search(r"Description:\t(.*)", out or "")
    if found:
        description = found.group(1).strip()
    else:
        for path in glob.glob("/etc/*-release"):
            try:
                with open(path) as handle:
                    text = handle.read(64 * 1024)
            except OSError:
                continue
            named = re.search(r'PRETTY_NAME="(.*)"', text)
            if named:
                description = named.group(1)
                break
    return f"{description or system.lower()} ({platform.machine()})"


def _pip_packages() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"] or ""
        line = f"{name}=={distribution.version}"
        if any(pattern in line for pattern in PIP_PATTERNS):
            found[name] = distribution.version
    return dict(sorted(found.items()))


def _conda_packages() -> dict[str, str] | None:
    """conda-meta's records of the active conda env (or of this Python's prefix); None where
    there is no conda env."""
    prefix = os.environ.get("CONDA_PREFIX") or sys.prefix
    folder = os.path.join(prefix, "conda-meta")
    if not os.path.isdir(folder):
        return None
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json")))[:5000]:
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        name, version = str(record.get("name", "")), str(record.get("version", ""))
        if any(pattern in name for pattern in CONDA_PATTERNS):
            found[name] = f"{version} {record.get('build', '')}".strip()
    return found


def _allocator() -> dict[str, str]:
    return {name: os.environ[name] for name in ALLOCATOR_VARIABLES if name in os.environ}


def _cpu() -> dict[str, Any]:
    """lscpu's fields on Linux (model, flags, NUMA nodes and their CPUs, caches), whole, as
    collect_env prints them; the model name elsewhere."""
    out = _run(["lscpu"]) if platform.system() == "Linux" else None
    if not out:
        return {"cpu_model": platform.processor() or None}
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if value:
            fields[key.strip()] = value.strip()
    numa = {k: v for k, v in fields.items() if re.fullmatch(r"NUMA node\d+ CPU\(s\)", k)}
    caches = {k.removesuffix(" cache"): v for k, v in fields.items() if k.endswith(" cache")}
    return {
        "cpu_model": fields.get("Model name"),
        "cpu_flags": sorted(fields.get("Flags", "").split()),
        "numa_nodes": int(fields["NUMA node(s)"])
        if fields.get("NUMA node(s)", "").isdigit()
        else None,
        "numa_cpus": numa,
        "cpu_caches": caches,
        "lscpu": fields,
    }


if __name__ == "__main__":
    print(json.dumps(describe()))
