"""A cluster config written back as TOML that stands on its own (a run directory's copy).

Role: the one home of "the config a run used", as text. ``dpc run`` writes it into its run
directory, and every process of a cluster records it there at start
(``node/procs/entry.py``), so that ``dpc check`` and ``dpc reconcile`` accept a run made of
``dpc node`` processes (by hand, or on several hosts and gathered) as well as one made by
``dpc launch``.

Invariant: the text names every file it refers to by an absolute path (a source's data
``file``, the ``[cluster.tls]`` files; ``package:`` files stay named, they are found in the
installed package), so it loads the same wherever it is copied on the machine that ran it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from node.config.datafile import PACKAGE_PREFIX
from node.config.model import ClusterConfig

__all__ = ["config_text", "self_contained"]


def self_contained(raw: Mapping[str, Any], anchor: Path) -> dict[str, Any]:
    """``raw`` with every source's data ``file`` and the ``[cluster.tls]`` files made
    absolute (relative to ``anchor``, the directory of the file they were read from)."""
    out: dict[str, Any] = copy.deepcopy(dict(raw))
    tls = out.get("cluster", {}).get("tls") if isinstance(out.get("cluster"), dict) else None
    if isinstance(tls, dict):
        for key, value in tls.items():
            if isinstance(value, str):
                tls[key] = str((anchor / value).resolve())
    sources = out.get("sources")
    if isinstance(sources, dict):
        for src in sources.values():
            if (isinstance(src, dict) and isinstance(src.get("file"), str)
                    and not src["file"].startswith(PACKAGE_PREFIX)):  # package files stay named
                src["file"] = str((anchor / src["file"]).resolve())
    return out


def config_text(config: ClusterConfig) -> str:
    """``config`` as the TOML text of its file, self-contained (module docstring)."""
    return tomli_w.dumps(self_contained(config.raw, config.path.parent))
