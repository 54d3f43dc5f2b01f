"""Failed-node recovery: a restarted replica rebuilds its state, then rejoins (paper 4.7).

The paper restarts a failed node from an empty state and lets it refuse new clients until
it has processed enough input to be consistent again, which works for convergent-capable
operators. Our tuple ids are counters (every operator numbers its output), so a replica
rebuilt from a window of input alone would compute the same values under different ids,
and downstream switching (which resumes by id) would break. So recovery here is the
extension the paper names for that case, "a combination of checkpoints and logging":

1. The restarted replica (``dpc node CLUSTER.toml NAME --recover``) serves its control plane
   but answers no heartbeat and refuses every Subscribe: to the cluster it is still down.
2. It asks a partner (another replica of its node) for its state: ``POST /state`` on the
   partner's control plane, token-guarded. A partner answers only in STABLE with nothing
   tentative in force: its query network's snapshot, the (stable, tentative) ids each input
   link holds, the last id of each output stream and what each output buffer holds (the
   tail its consumers have not all acked). Otherwise the replica asks again.
3. It restores the snapshot, resumes every input link from the partner's ids (the upstream
   output buffers and the sources' logs replay the rest: their trimming waits for this
   replica's acks, which stopped when it died), starts its output buffers after the
   partner's last ids holding the partner's tails (so that a consumer the partner had not
   served yet, behind a cut link, can resume here), and takes a checkpoint.
4. It still refuses subscribers until it has caught up with its inputs (its SUnions'
   release within ``catch_up_slack`` plus a bucket of now), then answers heartbeats again:
   downstream may choose it from then on.

The earlier incarnation's output logs are kept as ``<stream>.incarnation-<k>.arrow`` and every
recovery is recorded in ``recoveries.jsonl`` beside them, so that ``dpc check`` can judge
both: the old log as a prefix (it was cut short by the kill), the new one as the
continuation of the stable stream after the partner's last id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

from node.config.model import ClusterConfig, ReplicaConfig
from node.net.tls import control_url, url_context
from node.procs.rundir import RunDir

__all__ = [
    "RECOVERY_RETRY",
    "StateAsk",
    "archive_output_logs",
    "fetch_partner_state",
    "http_state_ask",
    "record_recovery",
]

#: Seconds between two rounds of asking the partners for their state.
RECOVERY_RETRY = 0.2


def archive_output_logs(rd: RunDir, replica: str, streams: Sequence[str]) -> int:
    """Move the current output logs of ``replica`` aside as the next earlier incarnation;
    returns that incarnation's number (0: there were none, a first start)."""
    current = [s for s in streams if rd.replica_output(replica, s).exists()]
    if not current:
        return 0
    k = 1
    while any(rd.replica_output_before(replica, s, k).exists() for s in streams):
        k += 1
    for s in current:
        rd.replica_output(replica, s).rename(rd.replica_output_before(replica, s, k))
    return k


def record_recovery(rd: RunDir, replica: str, record: Mapping[str, Any]) -> None:
    """Append one recovery (partner, time, each output stream's restart id) to the log."""
    path = rd.replica_recoveries(replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(orjson.dumps(record) + b"\n")


#: Ask one partner for its state: the state, or why it cannot give it now.
StateAsk = Callable[[ReplicaConfig], Awaitable["dict[str, Any] | str"]]


@asynccontextmanager
async def http_state_ask(config: ClusterConfig, owner: str, incarnation: int = 0,
                         ) -> AsyncIterator[StateAsk]:
    """A :data:`StateAsk` over the partners' control planes (``POST /state``), saying who
    asks and its incarnation (its start time: a Flux partner pauses for that one)."""
    headers = {"Authorization": f"Bearer {config.token}"}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:

        async def ask(p: ReplicaConfig) -> dict[str, Any] | str:
            url = control_url(config, p, "state")
            try:
                async with http.post(url, json={"for": owner, "incarnation": incarnation},
                                     ssl=url_context(config) or True) as resp:
                    body = await resp.read()
                    answer = orjson.loads(body) if body else {}
                    if resp.status == 200 and isinstance(answer.get("network"), dict):
                        return dict(answer)
                    return str(answer.get("error", f"HTTP {resp.status}"))
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
                return f"unreachable ({type(exc).__name__})"

        yield ask


async def fetch_partner_state(
    partners: Sequence[ReplicaConfig], ask: StateAsk, log: logging.Logger, owner: str
) -> tuple[str, dict[str, Any]]:
    """Ask each partner in turn (``ask``) for its state until one gives it; (partner, state).

    Logs why each partner said no, once per reason, and a progress line every 5 s."""
    if not partners:
        raise RuntimeError(f"{owner}: cannot recover: its node has no other replica to "
                           "rebuild from (start it without --recover for a fresh start)")
    said: dict[str, str] = {}
    loop = asyncio.get_running_loop()  # its clock: virtual in the simulation
    started = last_note = loop.time()
    while True:
        for p in partners:
            answer = await ask(p)
            if isinstance(answer, dict):
                return p.name, answer
            if said.get(p.name) != answer:
                said[p.name] = answer
                log.warning("%s: recovering: partner %s cannot give its state yet: %s",
                            owner, p.name, answer)
        if loop.time() - last_note > 5:
            last_note = loop.time()
            log.warning("%s: still recovering after %.0f s: waiting for a STABLE partner",
                        owner, last_note - started)
        await asyncio.sleep(RECOVERY_RETRY)
