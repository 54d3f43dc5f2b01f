"""The data plane's authentication handshake: its proofs and its checks (pure: no I/O, no
clock, no randomness; node/net/auth.py draws the nonces and runs it on a connection).

Every connection opens with three messages (:mod:`protocol.messages`)::

    opener                                   server
      Hello(name_o, nonce_o)          ──►
                                      ◄──    Challenge(name_s, nonce_s, proof("server", ...))
      Proof(proof("client", ...))     ──►

Each proof is HMAC-SHA256, keyed by the cluster token, over the role ("server" or
"client"), both names and both nonces (:func:`proof`). So:

* the token never crosses the wire, and both sides prove they hold it (mutual: a process
  listening on a dead replica's port cannot answer as that replica);
* each side's proof binds the names it authenticated, so the server knows whom the
  connection speaks for, and the opener knows it reached the process it meant to;
* a recorded handshake cannot be replayed: the server's nonce is fresh on each connection
  (and the opener's on each attempt), so an old proof fails.

Why HMAC over the shared token rather than mutual TLS: every process already holds the
token (the control plane asks for it), it needs no certificates to run a cluster on one
host, and a failed handshake says which name failed. The token is the trust root: a process
that holds it may claim any name the config gives, so a deployment keeps it secret (README
"Security"); encryption in transit is TLS's business, orthogonal to this.
"""

from __future__ import annotations

import hashlib
import hmac
import string
from typing import Final, Literal

import orjson

__all__ = ["NONCE_BYTES", "check_nonce", "check_proof", "proof"]

#: Random bytes in a nonce (hex on the wire: twice as many characters).
NONCE_BYTES: Final = 16
_PROOF_CHARS: Final = 2 * hashlib.sha256().digest_size
_HEX: Final = frozenset(string.hexdigits.lower())
_LABEL: Final = "dpc-handshake-1"

Role = Literal["client", "server"]


def proof(token: bytes, role: Role, opener: str, opener_nonce: str, server: str,
          server_nonce: str) -> str:
    """``role``'s proof (hex) that it holds ``token``, over both names and nonces. The fields
    are a JSON array, so that no choice of names can make two handshakes hash alike."""
    data = orjson.dumps([_LABEL, role, opener, opener_nonce, server, server_nonce])
    return hmac.new(token, data, hashlib.sha256).hexdigest()


def check_nonce(nonce: str) -> str | None:
    """What is wrong with a peer's ``nonce`` (None: nothing)."""
    if len(nonce) != 2 * NONCE_BYTES or not _HEX.issuperset(nonce):
        return f"a nonce must be {2 * NONCE_BYTES} lowercase hex digits"
    return None


def check_proof(expected: str, got: str) -> bool:
    """Whether ``got`` is ``expected``, compared in constant time."""
    if len(got) != _PROOF_CHARS:
        return False
    return hmac.compare_digest(expected.encode(), got.encode("utf-8", "replace"))
