"""ddp_doctor.probes.job."""
