"""ddp-doctor: finds out why multi-GPU / multi-node PyTorch training will not start, hangs,
or runs wrong, and says how to fix it."""

__version__ = "0.1.0"
