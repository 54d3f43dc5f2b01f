"""(being written this session)."""
