"""ddp_doctor.readings."""
