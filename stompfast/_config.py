"""Connection settings: broker URLs and keyword options, checked before any I/O.

Kept apart from the client so that the sync facade, the CLI, the load generator
and the Spark integration parse URLs the same way without importing the client.

URL form: ``stomp://[login[:passcode]@]host[:port][/virtual_host]``. Percent
escapes are decoded in every part.

A passcode (or login) holding ``/``, ``?`` or ``#`` ends the URL's authority
early: ``stomp://guest:12/34@host/`` reads as host ``guest``, port 12 and a path
``/34@host/``. So a literal ``@`` anywhere after the authority (in the path,
query or fragment) is refused as ambiguous: write such characters
percent-encoded (``%2F``, ``%3F``, ``%23``, and ``%40`` for an ``@`` in a
virtual host or WebSocket path). In a list of URLs (``failover:(a,b)``) a
comma in a passcode would split the URL in two: every item must start with a
``scheme://``, or the list is refused as ambiguous (write ``%2C``). An ``@`` in
the userinfo itself is taken as part of it (the last ``@`` ends it), as
``urllib`` does.

No error message shows a URL as written: :func:`redact_url` replaces its userinfo
by ``***`` first, whether the URL parsed or not. With no path (or ``/``) the CONNECT ``host``
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

import re
from typing import Any, Optional
from urllib.parse import quote, unquote, urlsplit

from .errors import ConfigurationError

__all__ = ["DEFAULT_PORT", "Endpoint", "parse_url", "parse_urls", "redact_url"]

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
        # "tcp", "ssl", "ws" or "wss"
        self.scheme = scheme
        self.host = host
        self.port = port
        self.login = login
        self.passcode = passcode
        self.virtual_host = virtual_host
        # WebSocket only: the HTTP path (and query) of the upgrade request
        self.path = path

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
        return self._display(f"{quote(self.login, safe='')}@" if self.login else "", "/")

    def masked_url(self) -> str:
        """The endpoint as a URL for a person: the login, ``***`` for a passcode, the virtual host as the path.

        What the CLI prints. :func:`redact_url` leaves such a URL as it is.
        """
        user = ""
        if self.login is not None or self.passcode is not None:
            user = quote(self.login or "", safe="") + (":***" if self.passcode is not None else "") + "@"
        vhost = self.virtual_host
        return self._display(user, "/" if vhost in (None, "", "/") else "/" + quote(vhost, safe=""))

    def __repr__(self) -> str:
        # never echo credentials
        shown = self._display(f"{quote(self.login, safe='')}:***@" if self.login else "", "")
        return f"Endpoint('{shown}', virtual_host={self.virtual_host!r})"


def parse_url(url: str) -> Endpoint:
    """Parse ``stomp://login:passcode@host:port/vhost`` (or another scheme above) into an :class:`Endpoint`.

    Raises:
        ConfigurationError: not a STOMP URL, an ambiguous one (an ``@`` after the
            host part: see the module docstring), no host, or a bad port. The
            message shows the URL through :func:`redact_url`.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"broker URL must be a str, not {type(url).__name__}")
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
    # An unbalanced [ or ]: urllib's message would not say where
    except ValueError:
        raise ConfigurationError(
            f"cannot parse broker URL {shown!r}: a [ or ] outside an IPv6 address"
            " (percent-encode one in a login or passcode: %5B, %5D)"
        ) from None
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        # name the scheme only when it is one: in "guest:pw@host" it is the login
        named = f" {parts.scheme!r}" if _SCHEME_PREFIX.match(url) else ""
        raise ConfigurationError(
            f"unsupported URL scheme{named} in {shown!r}: expected stomp://host:port"
            " (or stomp+ssl://, ssl://, ws://, wss://)"
        )
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        # the authority ended at a "/", "?" or "#" before the userinfo's "@"
        raise ConfigurationError(
            f"ambiguous broker URL {shown!r}: an '@' after the host part (does a login or passcode"
            " hold '/', '?' or '#'?): percent-encode the passcode's special characters"
            " (%2F for '/', %3F for '?', %23 for '#', %40 for '@', %2C for ','); an '@' in a path as %40"
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"invalid port in broker URL {shown!r}") from None
    if not parts.hostname:
        raise ConfigurationError(f"broker URL {shown!r} names no host")
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
    if len(items) > 1:
        for number, item in enumerate(items, 1):
            if isinstance(item, str) and not _SCHEME_PREFIX.match(item):
                # a comma-separated list split by the caller (the Spark options do) cuts a
                # passcode holding a ',' in two, "stomp://u:a" and "b@h": echo neither
                raise ConfigurationError(
                    f"ambiguous list of broker URLs: item {number} does not start with scheme://, as when"
                    " a comma-separated list was split inside a login or passcode; percent-encode a ','"
                    " in one (%2C)"
                )
    endpoints = [item if isinstance(item, Endpoint) else parse_url(item) for item in items]
    return endpoints, {}


def _parse_failover(text: str) -> "tuple[list[Endpoint], dict[str, Any]]":
    body = text[len("failover:") :]
    shown = redact_url(text)
    query = ""
    if body.startswith("("):
        # The last one: a passcode may hold a ")"
        end = body.rfind(")")
        if end < 0:
            raise ConfigurationError(f"unbalanced parenthesis in {shown!r}")
        inner, rest = body[1:end], body[end + 1 :]
        if rest:
            if not rest.startswith("?"):
                raise ConfigurationError(f"unexpected text after the URL list in {shown!r}")
            query = rest[1:]
    # failover:url1,url2 (no parentheses, no options)
    else:
        inner = body
    urls = [u.strip() for u in inner.split(",") if u.strip()]
    if not urls:
        raise ConfigurationError(f"no broker URL in {shown!r}")
    if not all(_SCHEME_PREFIX.match(u) for u in urls):
        # "stomp://u:a,b@h" splits into "stomp://u:a" and "b@h": neither may be echoed
        raise ConfigurationError(
            f"ambiguous failover URL list {shown!r}: an item does not start with scheme://, as when"
            " a login or passcode holds a ','; percent-encode it (%2C)"
        )
    # ActiveMQ's tcp:// is accepted as stomp://
    endpoints = [parse_url(u) for u in urls]
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


#: a URL's start: ``scheme://``
_SCHEME_PREFIX = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
#: where the next URL of a list starts: a comma, then ``scheme://``
_NEXT_URL = re.compile(r",\s*[A-Za-z][A-Za-z0-9+.-]*://")
#: a userinfo already masked by this module: ``login:***``
_MASKED = re.compile(r"[^:]*:\*\*\*")


def redact_url(text: str) -> str:
    """``text`` (a URL, a list of URLs, or a message quoting some) with every userinfo replaced by ``***``.

    The one redaction of URLs as written: every error message that shows a URL
    passes it through here, whether the URL parsed or not. The userinfo is taken
    as everything from a ``//`` to the LAST ``@`` before the next URL of a list
    (a ``,`` then ``scheme://``) or the end of ``text``, so a passcode holding
    ``/``, ``?``, ``#``, ``,`` or ``@`` is hidden whole: ``stomp://guest:12/34@host/``
    becomes ``stomp://***@host/``. Text with an ``@`` and no ``//``
    (``guest:pw@host``) is hidden up to its last ``@``. The price is hiding too
    much in URLs that have an ``@`` after the host (``ws://h/a@b`` shows as
    ``ws://***@b``), which :func:`parse_url` refuses anyway. A userinfo already
    masked as ``login:***`` is kept, so redacting twice changes nothing.

    :attr:`Endpoint.url` and ``repr(Endpoint)`` need none of this: they are
    built from the parsed parts and never include the passcode.
    """
    if "@" not in text:
        return text
    start = text.find("//")
    if start < 0:
        lead = len(text) - len(text.lstrip("\"'([<{ "))
        return text[:lead] + "***" + text[text.rfind("@") :]
    out = [text[:start]]
    while start >= 0:
        begin = start + 2
        following = _NEXT_URL.search(text, begin)
        end = following.start() if following else len(text)
        at = text.rfind("@", begin, end)
        out.append(text[start:begin])
        if at >= 0 and not _MASKED.fullmatch(text, begin, at):
            out.append("***" + text[at:end])
        else:
            out.append(text[begin:end])
        start = text.find("//", end)
        out.append(text[end : start if start >= 0 else len(text)])
    return "".join(out)


def check_positive(name: str, value: Any, *, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number, not {value!r}")
    return value
