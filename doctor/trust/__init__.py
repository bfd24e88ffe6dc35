"""What holds against hostile input and unlucky machines: secrets out of every output
(secrets.py), nothing live reaches a terminal (inert.py), every report written safely
(output.py), standard streams that may be closed or full (streams.py), numeric options that are
finite and bounded (numbers.py)."""
