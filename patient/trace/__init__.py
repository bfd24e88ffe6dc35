"""ddp_doctor.patient.trace."""
