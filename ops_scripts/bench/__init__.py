"""``dpc bench``: measurements as ratios against a baseline taken in the same run.

* ``core.py``: ``dpc bench core``, the in-process operator chain against the codec;
* ``throughput.py``: ``dpc bench throughput``, one real replica's sustained rate against
  the raw codec + loopback limit.
"""

from ops_scripts.bench.core import run_core_bench
from ops_scripts.bench.throughput import raw_rate, run_throughput_bench

__all__ = ["raw_rate", "run_core_bench", "run_throughput_bench"]
