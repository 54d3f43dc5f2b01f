"""Streams between processes: the producer and consumer ends, and upstream choice.

* ``publisher.py``: the producer end of every stream (output buffers, replay on
  (re)subscribe, live fan-out, back-pressure, acks from every consumer, the grace period);
* ``link.py``: the consumer end (subscribe, fail over among producers, resume ids, acks,
  the corrections reader of a reconciling producer);
* ``resume.py`` (pure): the resume ids' rule, what a batch does to them;
* ``upstream.py`` (pure): heartbeat tracking, the paper's upstream replica preference,
  tmax filtering;
* ``monitor.py``: the HA monitor around it: heartbeats to every upstream replica (carrying
  the links' acks), switching the input links;
* ``corrections.py``: what a link's corrections reader holds and hands over;
* ``mutation.py``: the test-only breakages (``DPC_TEST_MUTATION``), read once per process.
"""

from node.streams.link import InputLink
from node.streams.monitor import UpstreamMonitor, UpstreamReplica, upstream_links
from node.streams.mutation import MUTATION_DUPLICATES, Mutation
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
    "MUTATION_DUPLICATES", "Choice", "HeartbeatTracker", "InputLink", "Mutation", "Publisher", "ReplicaView", "Resume",
    "TmaxFilter", "UpstreamMonitor", "UpstreamReplica", "choose_upstream", "upstream_links",
]
