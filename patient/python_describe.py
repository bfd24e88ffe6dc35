"""Inside the patient: describe this Python without importing torch (about 50 ms).

Run as `python -m ddp_doctor_patient.python_describe`; prints one JSON object. Written for
old interpreters too (no syntax newer than Python 3.6), so that a Python too old for the
doctor's job is still described and named instead of failing with a SyntaxError.
"""

import json
import os
import platform
import sys

# Packages around DDP whose versions a maintainer asks for first.
AROUND_DDP = (
    "torch",
    "numpy",
    "accelerate",
    "deepspeed",
    "transformers",
    "lightning",
    "pytorch-lightning",
    "torchvision",
    "nvidia-ml-py",
)
NCCL_WHEELS = ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13")


def describe():
    facts = {
        "executable": sys.executable,
        "version": ".".join(str(part) for part in sys.version_info[:3]),
        "implementation": platform.python_implementation(),
        "prefix": sys.prefix,
        "virtual_env": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        "torch_origin": _torch_origin(),
        "os_release": _os_release(),
        "libc": " ".join(part for part in platform.libc_ver() if part) or None,
    }
    facts["packages"], facts["nccl_libraries"] = _packages()
    return facts


def _torch_origin():
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    return None if spec is None else (spec.origin or "namespace package")


def _os_release():
    try:
        with open("/etc/os-release") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform() or None


def _packages():
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return {}, []
    versions = {}
    libraries = []
    for name in AROUND_DDP + NCCL_WHEELS:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        versions[name] = distribution.version
        if name in NCCL_WHEELS:
            libraries.extend(_nccl_files(distribution))
    return versions, libraries


def _nccl_files(distribution):
    found = []
    for path in distribution.files or ():
        if os.path.basename(str(path)).startswith("libnccl.so"):
            found.append(str(distribution.locate_file(path)))
    return found


if __name__ == "__main__":
    print(json.dumps(describe()))
