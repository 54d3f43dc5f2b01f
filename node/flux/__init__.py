"""Flux's process-pair protocol for partition pairs (Shah, Hellerstein, Brewer; docs/flux.md).

* ``events.py``: the controller's failure detector and its totally ordered fail / avail
  events (pure);
* ``controller.py``: the controller process (``dpc node CLUSTER controller``), probing the
  replicas of flux nodes and serving the events;
* ``follow.py``: a process's side: every event once, in order.

What each process does on an event lives with the process: a replica's in
node/replica/flux.py, a source's in node/procs/source.py.
"""

from node.config.model import ClusterConfig

__all__ = ["follows_controller"]


def follows_controller(config: ClusterConfig, name: str) -> bool:
    """Whether process ``name`` acts on the controller's events: a replica of a flux node
    (take-over, catch-up), and every producer one of them reads from (it stops waiting for
    a failed consumer's acks)."""
    flux = {r.name for n in config.nodes.values() if n.settings.ha == "flux" for r in n.replicas}
    if not flux:
        return False
    if name in flux:
        return True
    if name in config.sources:
        streams = [name]
    else:
        try:
            node = config.nodes[config.replica(name).node]
        except KeyError:
            return False
        streams = list(node.outputs)
    return any(c in flux for s in streams for c in config.consumers_of(s))
