"""TLS for the data and control planes, when the config gives certificates ([cluster.tls]).

Encryption in transit is TLS's business; authentication of processes stays the token
handshake's (node/net/auth.py), which runs inside the TLS connection as on plain TCP. So
one certificate for the whole cluster is enough: it must name every host the config uses
(subject alternative names: IP addresses or DNS names), and each process presents it as a
server and as a client (mutual TLS: a peer without a certificate the cluster's CA signed
does not even reach the handshake).

* :func:`server_context`: requires a client certificate signed by ``ca``;
* :func:`client_context`: verifies the server's certificate against ``ca`` and the host
  name the config gives for it, and presents the cluster's certificate;
* :func:`control_url` and :func:`url_context`: how a tool reaches a control plane
  (``https`` with the CA, or ``http``).

Off by default: on loopback, in one machine, the examples run in clear (README "Security").
"""

from __future__ import annotations

import functools
import ssl

from node.config.model import ClusterConfig, ControllerConfig, ReplicaConfig, TlsFiles

__all__ = ["client_context", "control_url", "server_context", "url_context"]


@functools.cache
def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The context every server of a process uses (data port and control plane)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files.ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(files.cert), str(files.key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@functools.cache
def client_context(files: TlsFiles) -> ssl.SSLContext:
    """The context every connection a process opens uses."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(files.ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(files.cert), str(files.key))
    return ctx


def control_url(config: ClusterConfig, process: ReplicaConfig | ControllerConfig,
                path: str) -> str:
    """The URL of ``path`` on ``process``'s control plane: at *its* host (each process's
    control plane binds on its own, ``control_address``), never a cluster-wide one."""
    scheme = "https" if config.tls is not None else "http"
    host = process.control_address
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}:{process.control_port}/{path.lstrip('/')}"


def url_context(config: ClusterConfig) -> ssl.SSLContext | None:
    """What an HTTP client passes to reach the cluster's control planes (None: plain)."""
    return None if config.tls is None else client_context(config.tls)
