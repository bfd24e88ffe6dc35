"""torch's flight recorder: read each rank's dump (as data, never by unpickling), line the
ranks' collectives up, and name where they diverged.

record.py reads and compares a job's dumps; sniff.py tells a dump from a log without importing
the rest (`logs FILE` asks that of every file).
"""
