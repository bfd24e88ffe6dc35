"""The measurers: they collect facts and never judge them (import ddp_doctor.probes)."""
