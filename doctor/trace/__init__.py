"""`ddp-doctor trace`: the user's own training under a thin monitor, read back and judged."""
