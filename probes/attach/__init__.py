"""Measurers for `attach`: the running job's processes in /proc, their stacks through py-spy."""
