"""A run's hosts: each process on a host of its own, and links the kernel can cut.

* ``placement.py``: where each process lives (``--hosts local|netns|ssh``), recorded in
  ``RUN_DIR/hosts.json``; the config rewritten for it (pure);
* ``netns.py``: hosts as network namespaces joined by a bridge, made and removed with ``ip``;
* ``ssh.py``: processes started on their hosts over SSH, and their logs gathered back;
* ``session.py``: a run's hosts from its start to its end (``with run_hosts(...)``), and
  the removal of a crashed run's leftovers.

The kernel's cuts between these hosts are the nemesis's: ``ops_scripts/harness/kernel.py``.
"""
