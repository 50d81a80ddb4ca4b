"""Connection settings: broker URLs and keyword options, checked before any I/O.

Kept apart from the client so that the sync facade, the CLI, the load generator
and the Spark integration parse URLs the same way without importing the client.

URL form: ``stomp://[login[:passcode]@]host[:port][/virtual_host]``. Percent
escapes are decoded in every part. With no path (or ``/``) the CONNECT ``host``
header is ``/``: RabbitMQ reads it as its default virtual host, and ActiveMQ and
Artemis ignore it, so a plain ``stomp://127.0.0.1:61613`` works on all three
(``host:127.0.0.1`` would be refused by RabbitMQ).

Schemes, the transport each selects, and the port used when the URL names none:

* ``stomp://``, ``tcp://``: plain TCP, 61613;
* ``stomp+ssl://``, ``stomp+tls://``, ``ssl://`` (ActiveMQ's spelling): TLS, 61614;
* ``ws://``: STOMP over WebSocket, 80; ``wss://``: over WebSocket over TLS, 443.

In a WebSocket URL the path (and query) is the HTTP path of the upgrade request
(RabbitMQ's Web-STOMP listens on ``/ws``), never the virtual host, which stays
``/`` unless the ``virtual_host`` keyword says otherwise.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import unquote, urlsplit

from .errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "Endpoint", "parse_url", "parse_urls"]

DEFAULT_PORT = 61613
#: URL scheme -> transport: "tcp", "ssl" (TLS), "ws" (WebSocket), "wss" (WebSocket over TLS)
_SCHEMES = {
    "stomp": "tcp",
    "tcp": "tcp",
    "stomp+ssl": "ssl",
    "stomp+tls": "ssl",
    "ssl": "ssl",
    "ws": "ws",
    "wss": "wss",
}
#: the port of each transport when the URL names none
_DEFAULT_PORTS = {"tcp": DEFAULT_PORT, "ssl": 61614, "ws": 80, "wss": 443}


class Endpoint:
    """Where and as whom to connect: the parsed form of one broker URL."""

    __slots__ = ("scheme", "host", "port", "login", "passcode", "virtual_host", "path")

    def __init__(
        self,
        host: str,
        port: int = DEFAULT_PORT,
        *,
        scheme: str = "tcp",
        login: Optional[str] = None,
        passcode: Optional[str] = None,
        virtual_host: Optional[str] = "/",
        path: str = "/",
    ) -> None:
        self.scheme = scheme  # "tcp", "ssl", "ws" or "wss"
        self.host = host
        self.port = port
        self.login = login
        self.passcode = passcode
        self.virtual_host = virtual_host
        self.path = path  # WebSocket only: the HTTP path (and query) of the upgrade request

    @property
    def tls(self) -> bool:
        """True when the scheme asks for TLS (``stomp+ssl``, ``ssl``, ``wss``...)."""
        return self.scheme in ("ssl", "wss")

    @property
    def websocket(self) -> bool:
        return self.scheme in ("ws", "wss")

    def _display(self, user: str, tcp_path: str) -> str:
        scheme = {"tcp": "stomp", "ssl": "stomp+ssl"}.get(self.scheme, self.scheme)
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = self.path if self.websocket else tcp_path
        return f"{scheme}://{user}{host}:{self.port}{path}"

    @property
    def url(self) -> str:
        """The endpoint as a URL, for logs and events: the passcode is never included."""
        return self._display(f"{self.login}@" if self.login else "", "/")

    def __repr__(self) -> str:
        # never echo credentials
        shown = self._display(f"{self.login}:***@" if self.login else "", "")
        return f"Endpoint('{shown}', virtual_host={self.virtual_host!r})"


def parse_url(url: str) -> Endpoint:
    """Parse ``stomp://login:passcode@host:port/vhost`` (or another scheme above) into an :class:`Endpoint`.

    Raises:
        ConfigurationError: not a STOMP URL, no host, or a bad port.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"broker URL must be a str, not {type(url).__name__}")
    parts = urlsplit(url)
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise ConfigurationError(
            f"unsupported URL scheme {parts.scheme!r} in {_redact(url)!r}: expected stomp://host:port"
            " (or stomp+ssl://, ssl://, ws://, wss://)"
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"invalid port in broker URL {_redact(url)!r}") from None
    if not parts.hostname:
        raise ConfigurationError(f"broker URL {_redact(url)!r} names no host")
    if scheme in ("ws", "wss"):
        # the HTTP request target, sent as written (still percent-encoded)
        http_path = parts.path or "/"
        if parts.query:
            http_path += "?" + parts.query
        virtual_host = "/"
    else:
        http_path = "/"
        path = unquote(parts.path)
        virtual_host = "/" if path in ("", "/") else path[1:]
    return Endpoint(
        parts.hostname,
        _DEFAULT_PORTS[scheme] if port is None else port,
        scheme=scheme,
        login=unquote(parts.username) if parts.username is not None else None,
        passcode=unquote(parts.password) if parts.password is not None else None,
        virtual_host=virtual_host,
        path=http_path,
    )


#: ActiveMQ failover options we honour (names as ActiveMQ spells them) and how to read them.
_FAILOVER_OPTIONS = {
    "randomize": "bool",
    "initialReconnectDelay": "ms",
    "maxReconnectDelay": "ms",
    "useExponentialBackOff": "bool",
    "backOffMultiplier": "float",
    "maxReconnectAttempts": "int",
    "startupMaxReconnectAttempts": "int",
}


def parse_urls(urls: Any) -> "tuple[list[Endpoint], dict[str, Any]]":
    """Parse one URL, a list of URLs, or ActiveMQ's ``failover:(url1,url2)?options``.

    Returns the endpoints in order and the failover options found (ActiveMQ's
    names, values converted: delays in seconds, ``-1`` attempts as ``None``).
    Unknown failover options are refused rather than ignored.

    Raises:
        ConfigurationError: an empty list, a bad URL in it, or a bad option.
    """
    if isinstance(urls, str):
        text = urls.strip()
        if text.lower().startswith("failover:"):
            return _parse_failover(text)
        return [parse_url(text)], {}
    if isinstance(urls, Endpoint):
        return [urls], {}
    try:
        items = list(urls)
    except TypeError:
        raise ConfigurationError(f"broker URL must be a str or a list of them, not {type(urls).__name__}") from None
    if not items:
        raise ConfigurationError("the list of broker URLs is empty")
    endpoints = [item if isinstance(item, Endpoint) else parse_url(item) for item in items]
    return endpoints, {}


def _parse_failover(text: str) -> "tuple[list[Endpoint], dict[str, Any]]":
    body = text[len("failover:") :]
    query = ""
    if body.startswith("("):
        end = body.find(")")
        if end < 0:
            raise ConfigurationError(f"unbalanced parenthesis in {_redact_all(text)!r}")
        inner, rest = body[1:end], body[end + 1 :]
        if rest:
            if not rest.startswith("?"):
                raise ConfigurationError(f"unexpected {rest!r} after the URL list in {_redact_all(text)!r}")
            query = rest[1:]
    else:  # failover:url1,url2 (no parentheses, no options)
        inner = body
    urls = [u.strip() for u in inner.split(",") if u.strip()]
    if not urls:
        raise ConfigurationError(f"no broker URL in {_redact_all(text)!r}")
    endpoints = [parse_url(u) for u in urls]  # ActiveMQ's tcp:// is accepted as stomp://
    options: "dict[str, Any]" = {}
    for pair in filter(None, query.split("&")):
        name, _, value = pair.partition("=")
        kind = _FAILOVER_OPTIONS.get(name)
        if kind is None:
            raise ConfigurationError(
                f"unsupported failover option {name!r} (supported: {', '.join(sorted(_FAILOVER_OPTIONS))})"
            )
        try:
            if kind == "bool":
                if value.lower() not in ("true", "false"):
                    raise ValueError
                options[name] = value.lower() == "true"
            elif kind == "ms":
                options[name] = int(value) / 1000.0
                if options[name] < 0:
                    raise ValueError
            elif kind == "float":
                options[name] = float(value)
                if options[name] < 1:
                    raise ValueError
            else:
                number = int(value)
                if number < -1:
                    raise ValueError
                options[name] = None if number == -1 else number
        except ValueError:
            raise ConfigurationError(f"bad value {value!r} for failover option {name!r}") from None
    return endpoints, options


def _redact_all(text: str) -> str:
    return ",".join(_redact(part) if "://" in part else part for part in text.split(","))


def _redact(url: str) -> str:
    """The URL with any passcode replaced by ``***`` (for error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def check_positive(name: str, value: Any, *, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number, not {value!r}")
    return value
