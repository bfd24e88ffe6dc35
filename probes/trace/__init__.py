"""ddp_doctor.probes.trace."""
