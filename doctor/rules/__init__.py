"""Importing this package registers every rule, one module per block of codes."""

from ddp_doctor import logscan as _logscan  # noqa: F401  (DDP5xx log patterns)
from ddp_doctor.script import rules as _script_rules  # noqa: F401  (DDP1xx, DDP91x)

from . import (  # noqa: F401
    collectives,
    devices,
    doctor_self,
    environment,
    install,
    job_output,
    memory,
    rendezvous,
)
