"""The cluster config: its data model, loading and validation.

A cluster is one TOML file (``examples/README.md`` documents it): sources, nodes with their
replicas and query networks, clients, and per-node settings. :func:`load_config` reads and
validates it once, at load, naming the file and the key in every :class:`ConfigError`;
everything downstream gets a :class:`ClusterConfig` whose times are integer microseconds.

* ``model.py``: the data model (frozen dataclasses);
* ``load.py``: TOML to model, defaults;
* ``check.py``: cross-checks (names, ports, streams, client subscriptions);
* ``partitions.py``: partitioned nodes expanded into their partitions (docs/partitions.md);
* ``roles.py``: who may send what to whom on the data plane (pure), read by node/net/auth.py;
* ``read.py``: typed readers of TOML tables, with the file and key in every error;
* ``text.py``: the config written back as self-contained TOML (a run directory's copy);
* ``datafile.py``: a file source's data file (``package:`` files, column types, event
  times and their order), read at load and by the source's generator.
"""

from node.config.load import DEFAULT_HOST, DEFAULT_SETTINGS, load_config, parse_config
from node.config.model import (
    AttributeGen,
    ClientConfig,
    ClusterConfig,
    NodeConfig,
    NodeSettings,
    ReplicaConfig,
    SourceConfig,
    TlsFiles,
)
from node.errors import ConfigError

__all__ = [
    "DEFAULT_HOST", "DEFAULT_SETTINGS", "AttributeGen", "ClientConfig", "ClusterConfig",
    "ConfigError", "NodeConfig", "NodeSettings", "ReplicaConfig", "SourceConfig", "TlsFiles",
    "load_config", "parse_config",
]
