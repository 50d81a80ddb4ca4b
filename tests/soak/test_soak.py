"""The soak and chaos suite, short profile: confirmed messages survive link faults and broker restarts.

Marked ``soak`` and skipped unless pytest gets ``--run-soak`` (``.ci/run`` runs
it as a step of its own: about two and a half minutes). Each test runs
:func:`harness.run_soak` (see its docstring for what is measured and why) and
prints its summary line: RabbitMQ (asyncio, link resets and a broker restart),
ActiveMQ (trio, every fault kind of the proxy), and the in-process broker (every
fault kind, with AsyncClient and with the blocking Client in threads). The
long profile is run by hand::

    python -m tests.soak --broker rabbitmq --minutes 10.5 --messages 1050000 --reset-every 2 --restarts 3

RabbitMQ's test restarts the broker ``STOMPFAST_SOAK_RESTARTS`` times (default
1) with ``scripts/brokers.sh restart rabbitmq`` (``STOMPFAST_BROKERS_SCRIPT``
when set); 0 keeps the faults to the proxy's link resets. ActiveMQ is never
restarted: the private instance the tests use is non-persistent, so a restart
loses its messages by design.
"""

from __future__ import annotations

import os
import socket
import sys

import pytest

from stompfast._config import parse_url
from stompfast.testing import Broker

from .harness import BROKERS, SoakConfig, run_soak

pytestmark = [pytest.mark.soak, pytest.mark.anyio, pytest.mark.timeout(600)]

MIXED = ("reset", "cut", "half_close", "stall", "outage")
RESTARTS = int(os.environ.get("STOMPFAST_SOAK_RESTARTS", "1"))


def require(name: str) -> str:
    """The URL of a real broker that answers STOMP; else skip (fail with STOMPFAST_REQUIRE_BROKERS=1)."""
    url = BROKERS[name]
    ep = parse_url(url)
    try:
        with socket.create_connection((ep.host, ep.port), timeout=3) as s:
            s.settimeout(5)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
            ok = s.recv(64).startswith(b"CONNECTED")
    except OSError:
        ok = False
    if not ok:
        message = f"{name} does not answer STOMP at {url} (scripts/brokers.sh start)"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return url


def check(result, capsys) -> None:
    with capsys.disabled():
        print("\n" + result.summary(), flush=True)
    assert not result.problems(), result.problems()
    assert result.faults_injected >= 10, "too few faults for a chaos run"


@pytest.mark.parametrize("anyio_backend", [pytest.param(("asyncio", {}), id="asyncio")])
async def test_soak_rabbitmq_link_resets_and_restarts(capsys):
    if RESTARTS and sys.platform != "linux":
        pytest.skip("restarting RabbitMQ needs scripts/brokers.sh")
    config = SoakConfig(url=require("rabbitmq"), broker="rabbitmq", messages=20_000, seconds=40,
                        reset_every=2.0, restarts=RESTARTS)
    result = await run_soak(config)
    assert len(result.restarts) == RESTARTS
    check(result, capsys)


@pytest.mark.parametrize("anyio_backend", [pytest.param(("trio", {}), id="trio")])
async def test_soak_activemq_link_resets(capsys):
    # every kind of fault the proxy has, picked at random each round; heart-beats short enough that a stall
    # ends sessions with HeartbeatTimeout
    config = SoakConfig(url=require("activemq"), broker="activemq", messages=20_000, seconds=40,
                        reset_every=2.0, faults=MIXED, heart_beat=1000)
    check(await run_soak(config), capsys)


UVLOOP = pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop")


@pytest.mark.parametrize("anyio_backend", [UVLOOP])
@pytest.mark.parametrize("client", ["async", "sync"])
async def test_soak_in_process_broker_every_fault(capsys, client):
    async with Broker(record=False) as broker:  # no frame log: its memory counts in the RSS
        config = SoakConfig(url=broker.url, broker=f"in-process ({client} client)", messages=10_000,
                            seconds=20, reset_every=1.0, persistent=False, faults=MIXED, heart_beat=1000,
                            client=client)
        check(await run_soak(config), capsys)

