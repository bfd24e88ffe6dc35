"""Importing this package registers every rule, one module per block of codes."""

from . import devices, doctor_self, environment, install  # noqa: F401
