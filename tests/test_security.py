"""Security properties that must stay true (SECURITY.md, docs/guarantees.md).

* Credentials never show: not in reprs, exception messages (and their causes),
  log records at DEBUG, or the CLI's output, whatever way the connection fails.
* Header injection is impossible on every STOMP version: what a version cannot
  carry (LF, CR, NUL, a colon in a 1.0 or CONNECT header name) is refused with
  LocalProtocolError before anything is written.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import traceback
from typing import Any, List

import anyio
import pytest

from stompfast import (
    AsyncClient,
    AuthenticationError,
    Client,
    LocalProtocolError,
    ReconnectPolicy,
    StompError,
)
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

SECRET = "Pw-7f3a9c-not-for-eyes"


def _everything_shown(exc: BaseException) -> str:
    """All an operator could see of an exception: str, repr, the formatted chain."""
    return "\n".join([str(exc), repr(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))])


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.DEBUG)
    return caplog


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records) + caplog.text


def test_reprs_and_endpoints_never_show_the_passcode():
    client = AsyncClient(f"failover:(stomp://alice:{SECRET}@127.0.0.1:1,stomp://bob:{SECRET}@127.0.0.1:2)")
    shown = repr(client) + repr(client.endpoints) + str(client.endpoints) + " ".join(e.url for e in client.endpoints)
    assert SECRET not in shown
    keyword = AsyncClient("stomp://127.0.0.1:1/", login="alice", passcode=SECRET)
    assert SECRET not in repr(keyword) + repr(keyword.endpoints)


def test_reprs_of_connected_clients_and_the_broker_show_the_url_without_the_passcode():
    with Broker.in_thread() as broker:
        with Client(broker.url.replace("stomp://", f"stomp://alice:{SECRET}@"), heart_beat=(0, 0)) as client:
            shown = repr(client) + repr(client.async_client) + repr(broker)
            assert "stomp://alice@127.0.0.1:" in repr(client) and "connected" in repr(client.async_client)
        shown += repr(client) + repr(client.async_client)
    assert SECRET not in shown and "closed" in repr(client)


def test_a_refused_connection_never_shows_the_passcode(records):
    url = f"stomp://alice:{SECRET}@127.0.0.1:1/"
    with pytest.raises(StompError) as info:
        with Client(url, connect_timeout=2, reconnect=False):
            pass
    assert SECRET not in _everything_shown(info.value)
    assert SECRET not in _logged(records)


def test_a_refused_login_never_shows_the_passcode(records):
    with Broker.in_thread(users={"alice": "the-right-one"}) as broker:
        url = broker.url.replace("stomp://", f"stomp://alice:{SECRET}@")
        with pytest.raises(AuthenticationError) as info:
            with Client(url, connect_timeout=5, reconnect=False):
                pass
    assert SECRET not in _everything_shown(info.value)
    assert SECRET not in _logged(records)


@pytest.mark.anyio
async def test_reconnects_and_failover_never_show_the_passcode(records):
    events: List[Any] = []
    async with Broker() as broker:
        url = f"failover:(stomp://alice:{SECRET}@127.0.0.1:1,{broker.url.replace('stomp://', f'stomp://alice:{SECRET}@')})"
        client = AsyncClient(url, heart_beat=(0, 0), on_event=events.append,
                             reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0))
        async with client:
            broker.drop_connections()
            with anyio.fail_after(10):
                while sum(e.kind == "connected" for e in events) < 2:
                    await anyio.sleep(0.01)
            await client.send("/queue/s", b"x", receipt=True)
    shown = _logged(records) + repr(events) + " ".join(str(getattr(e, "error", "")) for e in events)
    assert events and SECRET not in shown


def test_the_cli_never_shows_the_passcode():
    exe = shutil.which("stompfast", path=os.path.dirname(sys.executable)) or shutil.which("stompfast")
    assert exe, "the stompfast command is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    for args in (
        ["send", "--url", f"stomp://alice:{SECRET}@127.0.0.1:1/", "--connect-timeout", "2", "/queue/x", "hi"],
        ["send", "--url", f"stomp://alice:{SECRET}@127.0.0.1:1/", "--debug", "--connect-timeout", "2",
         "/queue/x", "hi"],
        ["send", "--url", "stomp://127.0.0.1:1/", "--login", "alice", "--passcode", SECRET, "--connect-timeout", "2",
         "/queue/x", "hi"],
    ):
        done = subprocess.run([exe, *args], capture_output=True, env=env, timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode != 0
        assert SECRET.encode() not in done.stdout + done.stderr, args


# -- header injection ----------------------------------------------------------------------------

INJECTIONS = [  # (case, the send's keyword arguments, the header as the receiver must see it if carried)
    ("a value holding LF", {"headers": {"x-note": "a\nSEND\ndestination:/queue/evil\n\nboo"}}),
    ("a frame smuggled in a value", {"headers": {"x-note": "a\n\nboo\x00SEND\ndestination:/queue/evil\n\nx"}}),
    ("a value holding CR", {"headers": {"x-note": "a\rb"}}),
    ("a value holding NUL", {"headers": {"x-note": "a\x00b"}}),
    ("a name holding LF", {"headers": {"x\nevil": "v"}}),
    ("a name holding a colon", {"headers": {"x:evil": "v"}}),
    ("a content type holding LF", {"content_type": "text/plain\ndestination:/queue/evil"}),
]
# What each version carries, escaped (1.1 has no \r escape; 1.0 none at all; NUL none).
CARRIED = {
    "1.0": set(),
    "1.1": {"a value holding LF", "a name holding LF", "a name holding a colon", "a content type holding LF"},
    "1.2": {"a value holding LF", "a value holding CR", "a name holding LF", "a name holding a colon",
            "a content type holding LF"},
}


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("name,kwargs", INJECTIONS, ids=[n for n, _ in INJECTIONS])
def test_header_injection_is_impossible(version, name, kwargs):
    with Broker.in_thread() as broker:
        with Client(broker.url, versions=[version], heart_beat=(0, 0)) as client:
            with client.subscribe("/queue/in") as sub:
                if name in CARRIED[version]:  # escaped: arrives as the very same header, nothing injected
                    client.send("/queue/in", b"body", receipt=True, **kwargs)
                    got = sub.receive(timeout=5)
                    sent = kwargs.get("headers") or {"content-type": kwargs.get("content_type")}
                    assert {k: got.headers[k] for k in sent} == sent and got.body == b"body"
                else:  # refused by the call itself, before anything is written; queued sends too
                    for receipt in (True, False):
                        with pytest.raises(LocalProtocolError):
                            client.send("/queue/in", b"body", receipt=receipt, **kwargs)
                client.send("/queue/in", b"after")  # later calls are not troubled by it
                client.send("/queue/in", b"last", receipt=True)
                assert [sub.receive(timeout=5).body for _ in range(2)] == [b"after", b"last"]
            assert broker.queue_depth("/queue/evil") == 0


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_destination_cannot_inject_a_frame(version):
    with Broker.in_thread() as broker:
        with Client(broker.url, versions=[version], heart_beat=(0, 0)) as client:
            evil = "/queue/a\n\nboo\x00SEND\ndestination:/queue/evil\n\nx"
            with pytest.raises(LocalProtocolError):
                client.send(evil, b"x", receipt=True)
            client.send("/queue/a", b"ok", receipt=True)
        assert broker.queue_depth("/queue/evil") == 0 and broker.queue_depth("/queue/a") == 1


@pytest.mark.parametrize("field", ["login", "passcode"])
def test_connect_credentials_cannot_inject_headers(field):
    # CONNECT is never escaped, on any version: a CR or LF in a credential is refused.
    with Broker.in_thread() as broker:
        with pytest.raises(LocalProtocolError):
            with Client(broker.url, heart_beat=(0, 0), reconnect=False, **{field: "x\nhost:evil"}):
                pass
