"""Which query networks can run split by key: the check behind ``partition_by`` (pure).

A partitioned node (node/config/partitions.py) runs its network once per partition, each
copy fed only the input tuples whose key (the ``partition_by`` attributes) hashes to it
(protocol/exchange.py). The union of the copies' outputs equals the whole network's output
exactly when no result combines tuples of two partitions: every stateful operator works
within one key. :func:`partition_problems` follows the key attributes from the inputs
through the network and says where that fails:

* SUnion, union, filter, SOutput pass tuples on unchanged: the key goes through (through
  a multi-input one, under the names all its inputs agree on);
* a map carries a key attribute that it copies unchanged (``k = key``, under its new
  name); anything else it computes is not the key;
* an aggregate needs every key attribute among its ``group_by`` (its groups lie in one
  partition), and its output carries them;
* a join needs a pair of its ``on`` that equates the key attribute of both sides, for
  every key attribute (matching tuples lie in one partition); its output carries the left
  side's;
* any other operator keeping state is refused: nothing says it works within one key.

Invariant: a network with no problem computes, partition by partition, the same multiset of
results as whole (tests/node/config/test_partitions.py holds the reference runs equal).
"""

from __future__ import annotations

from collections.abc import Sequence

from .aggregate import Aggregate
from .filter import Filter
from .join import Join
from .map import Map
from .network import QueryNetwork
from .soutput import SOutput
from .sunion import SUnion
from .union import Union

__all__ = ["partition_problems"]

#: A stream's key attributes as it carries them: partition attribute -> its name there.
Carried = dict[str, str]


def partition_problems(net: QueryNetwork, by: Sequence[str]) -> list[str]:
    """Why ``net`` cannot run split on the attributes ``by`` of its inputs (none: it can)."""
    problems: list[str] = []
    carried: dict[str, Carried] = {}
    for stream, schema in net.spec.inputs.items():
        missing = [a for a in by if a not in schema]
        if missing:
            problems.append(f"input stream {stream!r} has no attribute {', '.join(missing)} "
                            f"(its schema: {', '.join(schema)})")
        carried[stream] = {a: a for a in by if a in schema}
    if problems:
        return problems
    inputs = {o.name: o.inputs for o in net.spec.operators}
    for op in net.operators:
        ins = [carried[i] for i in inputs[op.name]]
        out, problem = _through(op, ins, by)
        carried[op.name] = out
        if problem:
            problems.append(f"{op.describe()}: {problem}")
    return problems


def _through(op: object, ins: list[Carried], by: Sequence[str]) -> tuple[Carried, str | None]:
    """What ``op``'s output carries of the key, and why it breaks the split (or None)."""
    if isinstance(op, SUnion | Union | Filter | SOutput):
        first = ins[0]
        return {a: n for a, n in first.items() if all(c.get(a) == n for c in ins)}, None
    if isinstance(op, Map):
        (c,) = ins
        names = {n: a for a, n in c.items()}  # carried name -> key attribute
        out: Carried = {}
        for field, source in op.fields.items():
            a = names.get(source.strip())  # the expression is the attribute itself
            if a is not None:
                out.setdefault(a, field)
        return out, None
    if isinstance(op, Aggregate):
        (c,) = ins
        lost = [a for a in by if c.get(a) not in op.group_by]
        if lost:
            return {}, (f"its groups must lie within one partition: group_by "
                        f"({', '.join(op.group_by) or 'nothing'}) must hold the partition key "
                        f"{_show(lost, c)} as its input carries it")
        return dict(c), None
    if isinstance(op, Join):
        left, right = ins
        lost = [a for a in by if not (a in left and a in right
                                      and (left[a], right[a]) in op.on)]
        if lost:
            return {}, (f"matching tuples must lie within one partition: 'on' must pair the "
                        f"partition key {_show(lost, left)} of the left side with "
                        f"{_show(lost, right)} of the right")
        return dict(left), None
    return {}, (f"a {type(op).__name__} is not known to work within one key: a "
                "partitioned node cannot run it")


def _show(attrs: list[str], carried: Carried) -> str:
    return ", ".join(repr(carried.get(a, f"{a} (lost upstream)")) for a in attrs)
