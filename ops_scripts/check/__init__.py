"""ops_scripts/check."""
