"""TCP under uvloop, the loop every process runs on (node/procs/entry.py): what differs from
asyncio's own loop. Each test runs its own uvloop loop (outside pytest-asyncio's)."""

from __future__ import annotations

import contextlib

import uvloop

from node.net.tcp import TcpTransport
from node.net.transport import Connection


def test_abort_after_the_peer_reset_the_connection_under_uvloop() -> None:
    """A reset fault on a connection the peer had just reset answered ``POST /fault`` with
    HTTP 500 (``dpc soak``): under uvloop the socket of a lost connection is a pseudo-socket
    with descriptor -1, and setting its linger option raised ValueError. Abort is then a
    no-op on the socket and still ends the connection."""
    async def main() -> None:
        t = TcpTransport()

        async def handler(conn: Connection) -> None:
            conn.abort()  # type: ignore[attr-defined]

        srv = await t.serve("127.0.0.1", 0, handler)
        conn = await t.connect("127.0.0.1", srv.port)
        with contextlib.suppress(ConnectionResetError):
            assert await conn.receive() is None
        assert conn._writer.transport.is_closing()  # the reset reached our transport
        conn.abort()
        assert await conn.receive() is None
        await conn.close()
        await srv.close()

    uvloop.run(main())
