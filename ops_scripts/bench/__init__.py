"""ops_scripts/bench."""
