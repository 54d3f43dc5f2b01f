"""The processes of a cluster other than replicas, and what every process shares.

* ``source.py``, ``generators.py``: sources (seeded synthetic or file values, logged before
  they are sent, boundaries, end of stream); ``pacing.py``: the pure schedule of a source
  (which tuples are due when, with which ids and times);
* ``client.py``: clients (subscribe like a node, log every tuple with its arrival time);
* ``control.py``: the aiohttp control plane every replica serves;
* ``rundir.py``: the run directory and its log formats;
* ``runlog.py``: the clients' and replicas' tuple logs (Arrow IPC, a record per write);
* ``entry.py``: the entry point of every process (``dpc node CLUSTER.toml NAME``).

Nothing is re-exported here: each process imports only what its role needs (a client
neither aiohttp nor a replica's code), for its start-up time is a restarted replica's
recovery time (tests/node/procs/test_startup.py).
"""
