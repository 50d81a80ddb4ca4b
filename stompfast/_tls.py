"""TLS for the client: the SSL context it connects with, and what a failed handshake means.

:func:`client_ssl_context` builds the context of the client's ``ssl=True`` (and
of the stomp.py layer's ``set_ssl``); :func:`tls_error` turns the
``ssl.SSLError`` of a failed handshake into a :class:`~stompfast.TLSError` that
says whether the certificate was refused (and why, with the likely fix) or the
handshake itself failed (a plain-TCP port, most often). The transports
(``_transport.py``) open the connections and call :func:`tls_error` where a
handshake fails; nothing here does I/O.
"""

from __future__ import annotations

import ssl
from typing import Optional

from ._common import describe_error
from .errors import TLSError

__all__ = ["client_ssl_context", "tls_error"]


def client_ssl_context(
    cafile: Optional[str] = None,
    certfile: Optional[str] = None,
    keyfile: Optional[str] = None,
    password: Optional[str] = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """The SSL context a client connects with: ``ssl.create_default_context``'s, plus what is asked.

    ``cafile`` replaces the system's CAs as the trusted ones; ``certfile`` (with
    ``keyfile`` and its ``password``) is the client's own certificate. ``verify=False``
    checks neither the certificate nor the host name (stomp.py's ``set_ssl`` without
    ``ca_certs``); the protocol versions (TLS 1.2 and later) and ciphers stay the defaults.
    The client's ``ssl=True`` and the stomp.py layer's ``set_ssl`` both build theirs here.
    """
    if verify:
        context = ssl.create_default_context(cafile=cafile)
    else:
        # The default context would load the system's CAs only for nothing to check
        # against them; PROTOCOL_TLS_CLIENT has the same versions and ciphers without.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if certfile:
        context.load_cert_chain(certfile, keyfile or certfile, password)
    return context


def tls_error(peer: str, exc: ssl.SSLError, hostname: str) -> TLSError:
    """A TLSError naming what failed: the certificate check, or the handshake itself."""
    verify = getattr(exc, "verify_message", None)
    reason = getattr(exc, "reason", None)
    if verify:
        hint = ""
        lowered = verify.lower()
        if "issuer" in lowered or "self-signed" in lowered or "self signed" in lowered:
            hint = (
                " (it is not signed by a CA this SSL context trusts: pass ssl=ctx with"
                " ctx.load_verify_locations(cafile=...) for a private CA)"
            )
        elif "mismatch" in lowered:
            hint = f" (the name checked was {hostname!r}; server_hostname= overrides it)"
        message = f"TLS handshake with {peer} failed: the broker's certificate was refused: {verify}{hint}"
    else:
        what = reason or describe_error(exc)
        hint = " (is this a TLS port?)" if reason in ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING") else ""
        message = f"TLS handshake with {peer} failed: {what}{hint}"
    return TLSError(message, reason=reason, verify_message=verify)
