"""node/streams."""
