"""DDP511: a flight-recorder dump that could not be read. Registered on import."""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

describe(
    "DDP511",
    Remediation(
        "Check that the dump was written completely (a rank killed while dumping leaves it "
        "cut off) and that it comes from torch's flight recorder (TORCH_FR_DUMP_TEMP_FILE, "
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE, or _dump_fr_trace / _dump_fr_trace_json). Dumps are "
        "read as data only: a pickle that asks to build anything but plain containers, "
        "strings and numbers is refused.",
    ),
    """What it finds: a file among the flight-recorder dumps that is truncated, is not a dump,
or is a pickle that asks to build objects (a class, a function call) instead of plain data.
Why it matters: the comparison of ranks then misses that rank, and a rank without a dump is
often the one that crashed or hung.
Example: `nccl_trace_rank_3` cut short when rank 3 was killed during its dump.
Fix: rerun with the flight recorder on and keep every rank's dump; read the others as they
are.""",
)
