"""ddp_doctor.patient."""
