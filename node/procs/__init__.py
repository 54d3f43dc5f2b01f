"""The processes of a cluster other than replicas, and what every process shares.

* ``source.py``, ``generators.py``: sources (seeded synthetic or file values, logged before
  they are sent, boundaries, end of stream); ``pacing.py``: the pure schedule of a source
  (which tuples are due when, with which ids and times);
* ``client.py``: clients (subscribe like a node, log every tuple with its arrival time);
* ``control.py``: the aiohttp control plane every replica serves;
* ``rundir.py``: the run directory and its log formats;
* ``entry.py``: the entry point of every process (``dpc node CLUSTER.toml NAME``). It is
  not re-exported here: it imports the replica, which imports this package.
"""

from node.procs.client import Client
from node.procs.control import ControlPlane
from node.procs.generators import arrow_types, make_generator
from node.procs.rundir import (
    JsonlTupleWriter,
    RunDir,
    read_client_parquet,
    read_jsonl_tuples,
    read_source_end,
    read_source_log,
    write_client_parquet,
    write_source_end,
)
from node.procs.source import END_OF_STREAM, Source

__all__ = [
    "END_OF_STREAM", "Client", "ControlPlane", "JsonlTupleWriter", "RunDir", "Source",
    "arrow_types", "make_generator", "read_client_parquet", "read_jsonl_tuples",
    "read_source_end", "read_source_log", "write_client_parquet", "write_source_end",
]
