"""Where the tests find the repository's files, wherever a test module sits in tests/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
