from ddp_doctor.cli import main

main()
