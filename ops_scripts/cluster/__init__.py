"""Running a cluster: its processes, each on its host, ``dpc status``, ``dpc demo``.

* ``launch.py``: start every process of a config by group, progress, drain, stop by pid;
  restart a killed replica or source (``dpc launch`` itself: ``harness/supervisor.py``);
* ``processes.py``: processes known by pid (liveness, identity, a handle on a non-child);
* ``spawn.py``: a process started forked from a warm fork server (in its host's namespace);
* ``hosts/``: where each process of a run lives (``--hosts local|netns|ssh``): placement,
  network namespaces, SSH, a run's hosts from start to end (docs/hosts.md);
* ``status.py``: each replica's state and streams, from the control planes;
* ``demo.py``: the main job (``make demo``).
"""

from ops_scripts.cluster.launch import (
    Launched,
    ProcessHandle,
    drain_streams,
    log_tail,
    restart_process,
    start_cluster,
    stop_cluster,
    wait_until,
)
from ops_scripts.cluster.processes import PidProcess, alive, find_pid, runs_node
from ops_scripts.cluster.status import fetch_status, print_status, resolve_config

__all__ = [
    "Launched", "PidProcess", "ProcessHandle", "alive", "drain_streams", "fetch_status",
    "find_pid", "log_tail", "print_status", "resolve_config", "restart_process", "runs_node",
    "start_cluster", "stop_cluster", "wait_until",
]
