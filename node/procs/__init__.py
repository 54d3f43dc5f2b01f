"""node/procs."""
