"""The client options, defined once: names and types (ClientOptions), defaults (DEFAULTS).

:class:`~stompfast.AsyncClient` and :class:`~stompfast.Client` take the same
keyword options (``Client`` adds where its event loop runs); both constructors
are ``(url=None, **options: Unpack[ClientOptions])`` and get their introspected
signature (``help()``, ``inspect.signature``, IDEs that read it) from here, so a
new option is written once: a line in ClientOptions, its default in DEFAULTS and
its description in AsyncClient's docstring. What each option means is documented
there (and in docs/client.md). :func:`link_settings` checks the options every
connection is opened with and gathers them into the client's
:class:`~stompfast._link.LinkSettings`.
"""


import difflib
import inspect
import ssl as _ssl
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._config import Endpoint, check_positive, parse_urls
from ._link import LinkSettings
from ._protocol import SUPPORTED_VERSIONS
from ._reconnect import ConnectionEvent, ReconnectPolicy
from .errors import ConfigurationError

try:
    from typing import TypedDict
except ImportError:  # pragma: no cover - Python < 3.8
    from typing_extensions import TypedDict

__all__ = [
    "DEFAULTS", "PROTOCOL_OPTIONS", "ClientOptions", "endpoints_and_policy", "link_settings", "resolve", "signature",
    "tls_options",
]


class ClientOptions(TypedDict, total=False):
    """Every keyword option of AsyncClient and Client (see AsyncClient for what each means)."""

    login: Optional[str]
    passcode: Optional[str]
    virtual_host: Optional[str]
    host: Optional[str]
    port: Optional[int]
    versions: Iterable[str]
    heart_beat: Sequence[int]
    heartbeat_tolerance: float
    connect_headers: Optional[Mapping[str, str]]
    client_id: Optional[str]
    connect_timeout: float
    use_stomp_command: bool
    routing_headers: bool
    persistent: Optional[bool]
    send_buffer_bytes: int
    stall_timeout: float
    disconnect_timeout: float
    max_frame_bytes: Optional[int]
    max_headers: Optional[int]
    max_header_bytes: Optional[int]
    reconnect: Union[bool, ReconnectPolicy]
    on_event: Optional[Callable[[ConnectionEvent], Any]]
    ssl: Union[bool, _ssl.SSLContext, None]
    server_hostname: Optional[str]
    websocket_max_message_bytes: int


#: The default of every option, in ClientOptions' order.
DEFAULTS: Dict[str, Any] = {
    "login": None,
    "passcode": None,
    "virtual_host": None,
    "host": None,
    "port": None,
    "versions": SUPPORTED_VERSIONS,
    "heart_beat": (10000, 10000),
    "heartbeat_tolerance": 3.0,
    "connect_headers": None,
    "client_id": None,
    "connect_timeout": 10.0,
    "use_stomp_command": False,
    "routing_headers": True,
    "persistent": None,
    "send_buffer_bytes": 4 * 1024 * 1024,
    "stall_timeout": 10.0,
    "disconnect_timeout": 5.0,
    "max_frame_bytes": None,
    "max_headers": None,
    "max_header_bytes": None,
    "reconnect": True,
    "on_event": None,
    "ssl": None,
    "server_hostname": None,
    "websocket_max_message_bytes": 65536,
}
assert list(DEFAULTS) == list(ClientOptions.__annotations__), "DEFAULTS must follow ClientOptions"


def resolve(options: Mapping[str, Any], owner: str) -> Dict[str, Any]:
    """``options`` over the defaults; an unknown name is a TypeError, as for any keyword argument."""
    unknown = [name for name in options if name not in DEFAULTS]
    if unknown:
        # heart_beat is spelt as the STOMP header (heart-beat); the rest say heartbeat: a common slip
        close = difflib.get_close_matches(unknown[0].replace("heartbeat", "heart_beat"), list(DEFAULTS), n=1)
        close = close or difflib.get_close_matches(unknown[0], list(DEFAULTS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}{hint}")
    return {**DEFAULTS, **options}


def signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature with ``**options`` spelled out: its positional parameters, the options, its own keywords."""
    own = list(inspect.signature(fn).parameters.values())
    hints = ClientOptions.__annotations__
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[name])
        for name, default in DEFAULTS.items()
    ]
    positional = [p for p in own if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = [p for p in own if p.kind is p.KEYWORD_ONLY]
    return inspect.signature(fn).replace(parameters=positional + options + keywords)


def endpoints_and_policy(url: Any, o: Mapping[str, Any]) -> Tuple[List[Endpoint], ReconnectPolicy]:
    """The broker list (the URLs, with the keyword overrides applied) and the reconnect policy."""
    host, port, login, passcode, virtual_host = o["host"], o["port"], o["login"], o["passcode"], o["virtual_host"]
    if url is not None:
        endpoints, failover = parse_urls(url)
    else:
        endpoints, failover = [Endpoint(host or "127.0.0.1")], {}
    if (host is not None or port is not None) and len(endpoints) > 1:
        raise ConfigurationError("host= and port= apply to a single broker, not to a list of URLs")
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise ConfigurationError(f"port must be an int from 1 to 65535, not {port!r}")
    for endpoint in endpoints:
        if host is not None:
            endpoint.host = host
        if port is not None:
            endpoint.port = port
        if login is not None:
            endpoint.login = login
        if passcode is not None:
            endpoint.passcode = passcode
        if virtual_host is not None:
            endpoint.virtual_host = virtual_host
    reconnect = o["reconnect"]
    if isinstance(reconnect, ReconnectPolicy):
        policy = reconnect
    elif isinstance(reconnect, bool):
        policy = ReconnectPolicy(enabled=reconnect)
    else:
        raise ConfigurationError(f"reconnect must be a bool or a ReconnectPolicy, not {reconnect!r}")
    if failover:
        policy = ReconnectPolicy.from_failover_options(failover, policy)
    return endpoints, policy


def tls_options(
    ssl: Any, server_hostname: Any, endpoints: Sequence[Endpoint]
) -> Tuple[Union[bool, _ssl.SSLContext, None], Optional[str]]:
    """The checked ``ssl=`` and ``server_hostname=`` options (and wsproto, if a URL is a WebSocket one)."""
    if ssl is not None and not isinstance(ssl, (bool, _ssl.SSLContext)):
        raise ConfigurationError(f"ssl must be None, a bool or an ssl.SSLContext, not {type(ssl).__name__}")
    if server_hostname is not None:
        if not (ssl or (ssl is None and any(ep.tls for ep in endpoints))):
            raise ConfigurationError("server_hostname is for TLS connections (ssl=True or a stomp+ssl:// URL)")
        if not isinstance(server_hostname, str) or not server_hostname:
            raise ConfigurationError(f"server_hostname must be a non-empty str, not {server_hostname!r}")
    if any(ep.websocket for ep in endpoints):
        from ._websocket import require_wsproto

        require_wsproto()
    return ssl, server_hostname


#: The options StompProtocol takes, passed on to each connection's session.
PROTOCOL_OPTIONS = (
    "versions", "heart_beat", "connect_headers", "use_stomp_command", "max_frame_bytes", "max_headers",
    "max_header_bytes", "routing_headers", "client_id", "persistent",
)


def link_settings(o: Mapping[str, Any], endpoints: Sequence[Endpoint]) -> LinkSettings:
    """The checked options every connection of a client is opened with (``o``: :func:`resolve`'s)."""
    ssl_option, server_hostname = tls_options(o["ssl"], o["server_hostname"], endpoints)
    heartbeat_tolerance = check_positive("heartbeat_tolerance", o["heartbeat_tolerance"])
    if heartbeat_tolerance < 1:
        raise ConfigurationError("heartbeat_tolerance must be at least 1 (a multiple of the broker's interval)")
    ws_max = o["websocket_max_message_bytes"]
    if type(ws_max) is not int or ws_max < 1:
        raise ConfigurationError(f"websocket_max_message_bytes must be a positive int, not {ws_max!r}")
    return LinkSettings(
        ssl=ssl_option,
        server_hostname=server_hostname,
        connect_timeout=check_positive("connect_timeout", o["connect_timeout"]),
        websocket_max_message_bytes=ws_max,
        send_buffer_bytes=check_positive("send_buffer_bytes", o["send_buffer_bytes"]),
        stall_timeout=check_positive("stall_timeout", o["stall_timeout"]),
        heartbeat_tolerance=heartbeat_tolerance,
        protocol_options={name: o[name] for name in PROTOCOL_OPTIONS},
    )
