"""Where the example cluster configs live: ``examples/`` at the top of the checkout, beside
the packages (``make`` installs the project editable, so that is where they are). The demo,
``dpc torture`` and ``dpc simulate`` take their default cluster from here."""

from __future__ import annotations

from pathlib import Path

__all__ = ["EXAMPLES"]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
