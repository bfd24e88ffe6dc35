"""ddp_doctor.run."""
