"""`attach`: diagnose a job that is running now, from its processes, stacks and CPU time."""
