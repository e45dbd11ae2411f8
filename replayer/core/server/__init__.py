"""The server as users run it: its command line, per-build defaults, slots and the host prompt cache."""
