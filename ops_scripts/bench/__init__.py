"""``dpc bench``: measurements as ratios against a baseline taken in the same run.

* ``core.py``: ``dpc bench core``, the in-process operator chain against the codec;
* ``layout.py``: the node the next three drive, whole or split into P partitions, and the
  config file they run it from (the loader expands the partitions);
* ``replica.py``: the harness of the next three: real replica processes (one, or one per
  partition), fed and read over loopback by the bench's own sources and clients, and what
  *sustained* means;
* ``throughput.py``: ``dpc bench throughput``, one real replica's sustained rate against
  the raw codec + loopback limit; with ``--partitions P`` also the node split into P
  partitions, one replica process each: the total, the rate per partition, each replica's
  CPU per tuple of its share, and the scaling against one replica measured in the same run;
* ``overhead.py``: ``dpc bench overhead``, that rate with fault tolerance as configured
  against the same with it off;
* ``latency.py``: ``dpc bench latency``, result latency per SUnion bucket width;
* ``failover.py``: ``dpc bench failover``, a real cluster: the time from a fault of the
  replica a client reads to the client's next new result;
* ``peers.py``: ``dpc bench peers``, the core query through our operators, Bytewax and
  Flink SQL (PyFlink), each when installed;
* ``reconcile.py``: ``dpc bench reconcile``, ``dpc reconcile`` (Spark) against ``dpc check``;
* ``replay.py``: ``dpc bench replay``, a reconciliation's replay per tuple against
  vectorized, per size;
* ``flux.py``: ``dpc bench flux``, the Flux paper's Fig. 8 on a real cluster of partition
  pairs: each producer's output rate through a machine's kill and two catch-ups, loss and
  duplicates judged by ``dpc check`` (plot by ``flux_plots.py``).
"""

from ops_scripts.bench.core import run_core_bench
from ops_scripts.bench.failover import run_failover_bench
from ops_scripts.bench.latency import run_latency_bench
from ops_scripts.bench.overhead import run_overhead_bench
from ops_scripts.bench.peers import run_peers_bench
from ops_scripts.bench.throughput import raw_rate, run_throughput_bench

__all__ = [
    "raw_rate", "run_core_bench", "run_failover_bench", "run_latency_bench", "run_overhead_bench",
    "run_peers_bench", "run_throughput_bench",
]
