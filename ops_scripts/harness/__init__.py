"""ops_scripts/harness."""
