"""Free loopback ports for processes that are started separately from whoever picks them.

Binding port 0 and releasing it returns a port from the kernel's *ephemeral* range
(32768-60999 on Linux), the same range outgoing connections take their local ports from:
between the pick and the child's bind, any connection on the machine may grab it ("address
already in use"). So ports are picked below that range, starting at a random offset (so
that concurrent runs rarely probe the same ports) and checked by binding.
"""

from __future__ import annotations

import os
import random
import socket

__all__ = ["free_port", "is_local_address"]

_LOW, _HIGH = 20_000, 32_000
_rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))
_next = _rng.randrange(_LOW, _HIGH)


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on now, outside the ephemeral range."""
    global _next
    for _ in range(_HIGH - _LOW):
        port = _next
        _next = _LOW + (_next + 1 - _LOW) % (_HIGH - _LOW)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port on {host} in {_LOW}-{_HIGH}")


def is_local_address(host: str) -> bool:
    """Whether a socket can listen on ``host`` here: one of this machine's (this network
    namespace's) addresses, a wildcard, or a name that resolves to one. Asked by binding
    port 0, which is what the process will do: the kernel's answer, not a guess from a
    list of interfaces."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            try:
                s.bind(address)
            except OSError:
                continue
            return True
    return False
