"""`python tests/doctor_with_fault.py FAULT ARGS...`: ddp-doctor ARGS with the test suite's
fault injector in its job (tests/job_hook/job_faults.py), for tests that run the doctor as a
process of its own (one per simulated node). Not shipped; FAULT "-" means none."""

from __future__ import annotations

import sys

from fakes import job_fault

from ddp_doctor.cli import main

if __name__ == "__main__":
    fault, *arguments = sys.argv[1:]
    with job_fault(None if fault == "-" else fault):
        main(arguments)
