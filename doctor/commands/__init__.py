"""One module per CLI command that is big enough to deserve its own file."""
