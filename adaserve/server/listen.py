"""The listening socket of `adaserve serve`, taken before anything heavy is imported or
loaded: a port in use is refused at once, in one line, not after the model has loaded and
the profile was measured (uvicorn would only find out when it binds, last)."""

from __future__ import annotations

import errno
import socket


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, for uvicorn to serve on."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind(addr)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def explain(host: str, port: int, error: OSError) -> str:
    """The one line a user reads when the address cannot be taken."""
    why = "the port is already in use" if error.errno == errno.EADDRINUSE \
        else error.strerror or str(error)
    return f"adaserve serve: cannot listen on {host}:{port}: {why}; choose another with --port"
