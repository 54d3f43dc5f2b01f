"""The data plane's transport: one interface, two implementations (STYLE.md 7).

* ``transport.py``: :class:`Transport`, :class:`Server`, :class:`Connection` (whole
  messages of ``protocol.messages`` in and out, the codec's frames below);
* ``tcp.py``: asyncio streams on loopback or a real network;
* ``memory.py``: in-process, with partition / delay / drop controls, for fast deterministic
  tests and the simulation (``dpc simulate``);
* ``auth.py``: the handshake and identity binding on top of either (:func:`authenticated`
  gives a process its transport); imported from ``node.net.auth``, not re-exported here,
  since it reads the cluster config (node/config/roles.py), which this package must not
  pull in for the code that only moves messages;
* ``tls.py``: TLS contexts and control-plane URLs when the config gives certificates;
* ``ports.py``: free ports for child processes.
"""

from node.net.memory import MemoryConnection, MemoryServer, MemoryTransport
from node.net.ports import free_port
from node.net.tcp import TcpConnection, TcpServer, TcpTransport
from node.net.transport import Connection, Handler, Server, Transport

__all__ = [
    "Connection", "Handler", "MemoryConnection", "MemoryServer", "MemoryTransport", "Server",
    "TcpConnection", "TcpServer", "TcpTransport", "Transport", "free_port",
]
