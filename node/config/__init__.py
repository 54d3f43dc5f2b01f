"""node/config."""
