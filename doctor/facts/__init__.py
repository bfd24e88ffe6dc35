"""ddp_doctor.facts."""
