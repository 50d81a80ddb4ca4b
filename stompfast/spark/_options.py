"""Option parsing for the Spark data sources: plain Python, no pyspark (testable without Spark).

Spark hands a data source its options as a case-insensitive map of strings. These
helpers turn them into typed values and raise :class:`~stompfast.ConfigurationError`
(a ``ValueError`` that pickles) for a bad one, naming the option.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, overload

from ..errors import ConfigurationError

__all__ = ["ConnectionOptions", "client_kwargs", "get_bool", "get_float", "get_int", "get_list", "prefixed"]

ACK_MODES = ("client-individual", "client", "auto")


def _get(options: Mapping[str, str], *names: str) -> Optional[str]:
    lowered = {str(k).lower(): v for k, v in options.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None:
            return str(value)
    return None


def get_list(options: Mapping[str, str], *names: str) -> List[str]:
    """A comma-separated option (the first of ``names`` present), stripped, empty items dropped."""
    value = _get(options, *names)
    if value is None:
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


@overload
def get_int(options: Mapping[str, str], name: str, default: int, minimum: int = ...) -> int: ...
@overload
def get_int(options: Mapping[str, str], name: str, default: None, minimum: int = ...) -> Optional[int]: ...
def get_int(options: Mapping[str, str], name: str, default: Optional[int], minimum: int = 1) -> Optional[int]:
    value = _get(options, name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(f"option {name!r} must be an integer, not {value!r}") from None
    if number < minimum:
        raise ConfigurationError(f"option {name!r} must be >= {minimum}, not {number}")
    return number


@overload
def get_float(options: Mapping[str, str], name: str, default: float, allow_zero: bool = ...) -> float: ...
@overload
def get_float(options: Mapping[str, str], name: str, default: None, allow_zero: bool = ...) -> Optional[float]: ...
def get_float(
    options: Mapping[str, str], name: str, default: Optional[float], allow_zero: bool = False
) -> Optional[float]:
    value = _get(options, name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise ConfigurationError(f"option {name!r} must be a number of seconds, not {value!r}") from None
    if not number >= 0 or (number == 0 and not allow_zero):
        raise ConfigurationError(f"option {name!r} must be {'>= 0' if allow_zero else '> 0'}, not {value!r}")
    return number


def get_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None or value == "":
        return default
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigurationError(f"option {name!r} must be true or false, not {value!r}")


def get_str(options: Mapping[str, str], name: str, default: Optional[str] = None) -> Optional[str]:
    value = _get(options, name)
    return default if value is None or value == "" else value


def prefixed(options: Mapping[str, str], prefix: str) -> Dict[str, str]:
    """Options named ``<prefix><name>`` as ``{name: value}`` (``header.x-priority`` -> ``x-priority``).

    Spark lower-cases option names, so header names given this way arrive lower-cased.
    """
    out: Dict[str, str] = {}
    for key, value in options.items():
        k = str(key)
        if k.lower().startswith(prefix.lower()) and len(k) > len(prefix):
            out[k[len(prefix):]] = str(value)
    return out


class ConnectionOptions:
    """The connection part of the options, shared by every stomp source and sink.

    ``url`` or ``urls`` (comma-separated: a failover list), ``login``, ``passcode``,
    ``virtualHost``, ``heartBeat`` (``"cx,cy"`` in ms, default ``10000,10000``),
    ``connectTimeout`` (s). A picklable value object: connections are made from it
    lazily, in the process that uses them.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        urls = get_list(options, "urls", "url")
        if not urls:
            raise ConfigurationError("option 'url' (or 'urls', comma-separated) is required, e.g."
                                     " .option('url', 'stomp://guest:guest@127.0.0.1:61613/')")
        self.urls: Tuple[str, ...] = tuple(urls)
        self.login = get_str(options, "login")
        self.passcode = get_str(options, "passcode")
        self.virtual_host = get_str(options, "virtualHost")
        beat = get_list(options, "heartBeat")
        if beat:
            try:
                cx, cy = (int(x) for x in beat)
            except ValueError:
                raise ConfigurationError(f"option 'heartBeat' must be two ms values 'cx,cy', not {beat!r}") from None
            self.heart_beat: Tuple[int, int] = (cx, cy)
        else:
            self.heart_beat = (10000, 10000)
        self.connect_timeout = get_float(options, "connectTimeout", 10.0)

    def client_kwargs(self) -> Dict[str, Any]:
        return client_kwargs(self)

    # Never the passcode
    def __repr__(self) -> str:
        return f"<ConnectionOptions urls={len(self.urls)} login={self.login!r}>"


def client_kwargs(conn: ConnectionOptions) -> Dict[str, Any]:
    """Keyword arguments for :class:`stompfast.Client` (no reconnect: Spark's retry is the recovery)."""
    kwargs: Dict[str, Any] = {
        "url": conn.urls[0] if len(conn.urls) == 1 else list(conn.urls),
        "heart_beat": conn.heart_beat,
        "connect_timeout": conn.connect_timeout,
        "reconnect": False,
    }
    if conn.login is not None:
        kwargs["login"] = conn.login
    if conn.passcode is not None:
        kwargs["passcode"] = conn.passcode
    if conn.virtual_host is not None:
        kwargs["virtual_host"] = conn.virtual_host
    return kwargs
