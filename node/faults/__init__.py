"""node/faults."""
