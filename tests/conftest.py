"""What every test process shares: the replay engines' thresholds are the config's and the
defaults, never the crossovers ``dpc bench replay`` stored on the developer's machine
(node/config/crossovers.py): the suite behaves the same on every machine, and the replicas
it starts inherit this."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ["DPC_CROSSOVERS"] = str(Path(tempfile.gettempdir()) /
                                   f"dpc-suite-{os.getpid()}-no-crossovers.json")
