"""The static rules DDP101-DDP127 (and the doctor's own DDP910/DDP911 for files it cannot read).

Importing this package registers every rule with ddp_doctor.registry; none imports torch.
"""

from . import data, devices, doctor, launch, process_group, ranks, training, wrapping

__all__ = ["data", "devices", "doctor", "launch", "process_group", "ranks", "training", "wrapping"]
