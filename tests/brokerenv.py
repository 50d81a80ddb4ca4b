"""The real brokers' URLs for the tests, from the settings ``scripts/brokers.sh`` reads.

``eval "$(scripts/brokers.sh env)"`` exports ``STOMPFAST_*_URL`` variables; the
script itself takes ports (``STOMPFAST_RABBITMQ_PORT``, ``STOMPFAST_ACTIVEMQ_PORT``...).
A run that moved the ports but did not eval the script's env again must not
silently test whatever answers on the default ports: a URL variable that is not set
is derived from its port variable (default: the script's default port), and a URL
that names another port than its port variable is refused with both in the message.
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, Mapping, Optional, Tuple

from stompfast._config import parse_url, redact_url

HOST = "127.0.0.1"

#: name -> (URL variable, port variable, the script's default port, the URL `brokers.sh env` prints)
BROKERS: Dict[str, Tuple[str, str, int, str]] = {
    "rabbitmq": ("STOMPFAST_RABBITMQ_URL", "STOMPFAST_RABBITMQ_PORT", 61613, "stomp://guest:guest@{host}:{port}/"),
    "rabbitmq_ws": ("STOMPFAST_RABBITMQ_WS_URL", "STOMPFAST_RABBITMQ_WS_PORT", 15674,
                    "ws://guest:guest@{host}:{port}/ws"),
    "rabbitmq_tls": ("STOMPFAST_RABBITMQ_TLS_URL", "STOMPFAST_RABBITMQ_TLS_PORT", 61617,
                     "stomp+ssl://guest:guest@{host}:{port}/"),
    "activemq": ("STOMPFAST_ACTIVEMQ_URL", "STOMPFAST_ACTIVEMQ_PORT", 61614, "stomp://guest:guest@{host}:{port}/"),
    "activemq_nio": ("STOMPFAST_ACTIVEMQ_NIO_URL", "STOMPFAST_ACTIVEMQ_NIO_PORT", 61615,
                     "stomp://guest:guest@{host}:{port}/"),
    # Artemis: the stock STOMP acceptor (no prefixes; WebSocket on the same port) and one
    # with anycastPrefix=/queue/;multicastPrefix=/topic/
    "artemis": ("STOMPFAST_ARTEMIS_URL", "STOMPFAST_ARTEMIS_PORT", 61618, "stomp://guest:guest@{host}:{port}/"),
    "artemis_prefix": ("STOMPFAST_ARTEMIS_PREFIX_URL", "STOMPFAST_ARTEMIS_PREFIX_PORT", 61619,
                       "stomp://guest:guest@{host}:{port}/"),
    "artemis_ws": ("STOMPFAST_ARTEMIS_WS_URL", "STOMPFAST_ARTEMIS_PORT", 61618, "ws://guest:guest@{host}:{port}/"),
}


def rabbitmq_node() -> str:
    """The ``scripts/brokers.sh`` name of the RabbitMQ node the URLs point at (``rabbitmq``: 3.10, ``rabbitmq4``).

    ``brokers.sh env rabbitmq4`` points the RabbitMQ variables at the 4.x node and
    says so in ``STOMPFAST_RABBITMQ_NODE``: a test that restarts "RabbitMQ" restarts that node.
    """
    return os.environ.get("STOMPFAST_RABBITMQ_NODE") or "rabbitmq"


def rabbitmqctl(*args: str, timeout: float = 60) -> "subprocess.CompletedProcess[str]":
    """``rabbitmqctl ARGS`` of the node the URLs point at (``brokers.sh rabbitmqctl``; 4.x: in its chroot)."""
    script = os.environ.get("STOMPFAST_BROKERS_SCRIPT") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "brokers.sh")
    return subprocess.run(["bash", script, "rabbitmqctl", rabbitmq_node(), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


class BrokerSettingsError(RuntimeError):
    """A broker's URL variable and port variable disagree (or the port is not a number)."""


def broker_url(name: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The URL of broker ``name`` (a key of :data:`BROKERS`); raises BrokerSettingsError on a mismatch."""
    env = os.environ if environ is None else environ
    url_var, port_var, default, template = BROKERS[name]
    port_text = env.get(port_var) or None
    try:
        port = int(port_text) if port_text is not None else None
    except ValueError:
        raise BrokerSettingsError(f"{port_var}={port_text!r} is not a port number") from None
    url = env.get(url_var) or None
    if url is None:
        return template.format(host=HOST, port=port if port is not None else default)
    if port is not None and parse_url(url).port != port:
        raise BrokerSettingsError(
            f"{url_var}={redact_url(url)} names another port than {port_var}={port}: the tests would talk to"
            f" another broker than scripts/brokers.sh manages; run eval \"$(bash scripts/brokers.sh env)\""
            f" again with the same {port_var}, or unset one of them"
        )
    return url
