"""node/net."""
