"""node/replica."""
