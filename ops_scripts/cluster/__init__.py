"""ops_scripts/cluster."""
