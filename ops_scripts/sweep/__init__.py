"""``dpc sweep``: the availability/consistency dial measured on real processes.

* ``experiment.py``: experiment files (a cluster, a grid of settings, a failure, plots),
  each point a self-contained scenario.
* ``run.py``: the loop: each run played as ``dpc run`` plays a scenario, measured, its CSV
  row appended; resumable, with progress and an estimate of the time left.
* ``measures.py``: a run's figures (Delay_new, N_tentative, reconciliation time, ...).
* ``report.py``: the plots (PNG) and ``report.html`` from the CSV.
"""

from .experiment import Experiment, PlotSpec, Point, load_experiment
from .measures import MEASURES, measure_run
from .report import read_results, write_report
from .run import run_sweep

__all__ = ["MEASURES", "Experiment", "PlotSpec", "Point", "load_experiment", "measure_run",
           "read_results", "run_sweep", "write_report"]
