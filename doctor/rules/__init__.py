"""Importing this package registers every rule, one module per block of codes."""

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
