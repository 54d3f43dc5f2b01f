"""Streams between processes: the producer and consumer ends, and upstream choice.

* ``publisher.py``: the producer end of every stream (output buffers, replay on
  (re)subscribe, live fan-out, back-pressure);
* ``link.py``: the consumer end (subscribe, fail over among producers, resume ids, acks,
  the corrections reader of a reconciling producer);
* ``upstream.py`` (pure): heartbeat tracking, the paper's upstream replica preference,
  tmax filtering;
* ``monitor.py``: the HA monitor around it: heartbeats to every upstream replica, switching
  the input links.
"""

from node.streams.link import InputLink
from node.streams.monitor import UpstreamMonitor, UpstreamReplica, upstream_links
from node.streams.publisher import Publisher
from node.streams.upstream import (
    Choice,
    HeartbeatTracker,
    ReplicaView,
    Resume,
    TmaxFilter,
    choose_upstream,
)

__all__ = [
    "Choice", "HeartbeatTracker", "InputLink", "Publisher", "ReplicaView", "Resume",
    "TmaxFilter", "UpstreamMonitor", "UpstreamReplica", "choose_upstream", "upstream_links",
]
