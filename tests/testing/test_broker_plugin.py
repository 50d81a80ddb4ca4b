"""The pytest plugin's fixtures, the broker in a thread, construction and import hygiene."""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
import time

import pytest

from stompfast import FrameScanner, encode_frame
from stompfast.testing import Broker


class SyncClient:
    """A blocking STOMP client on a plain socket (for the synchronous fixture)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=3)
        self.scanner = FrameScanner()
        self.frames: list = []

    def send(self, command, headers=(), body=b""):
        self.sock.sendall(encode_frame(command, headers, body))

    def recv(self):
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.frames.extend(self.scanner.feed(data))
        return self.frames.pop(0)

    def close(self):
        self.sock.close()


def test_thread_fixture_serves_sync_code(stomp_broker_thread):
    broker = stomp_broker_thread
    assert broker.url == f"stomp://127.0.0.1:{broker.port}/"
    c = SyncClient(broker.port)
    try:
        c.send("CONNECT", {"accept-version": "1.2"})
        assert c.recv().headers["version"] == "1.2"
        c.send("SUBSCRIBE", {"id": "0", "destination": "/queue/sync", "ack": "client"})
        broker.wait_for_blocking(lambda: broker.consumers("/queue/sync") == 1, timeout=2)
        broker.publish("/queue/sync", "hello")  # called from this thread, runs in the broker's loop
        m = c.recv()
        assert (m.command, m.body) == ("MESSAGE", b"hello")
        assert broker.unacked("/queue/sync") == 1
        assert broker.connections == 1 and broker.sessions == ["session-1"]
        assert broker.stats.frames_in == {"CONNECT": 1, "SUBSCRIBE": 1}
        broker.drop_connections()
        assert c.recv() is None
        broker.wait_for_blocking(lambda: broker.connections == 0, timeout=2)
        assert (broker.queue_depth("/queue/sync"), broker.unacked("/queue/sync")) == (1, 0)
        with pytest.raises(TimeoutError):
            broker.wait_for_blocking(lambda: False, timeout=0.05)
    finally:
        c.close()


@pytest.mark.stomp_broker(heart_beat=(0, 70), backend="trio")
def test_marker_configures_the_thread_fixture(stomp_broker_thread):
    c = SyncClient(stomp_broker_thread.port)
    try:
        c.send("CONNECT", {"accept-version": "1.1"})
        assert c.recv().headers["heart-beat"] == "0,70"
    finally:
        c.close()


@pytest.mark.anyio
@pytest.mark.stomp_broker(server="TestBroker/9", versions=("1.1",))
async def test_marker_configures_the_async_fixture(stomp_broker, anyio_backend):
    from rawstomp import RawClient

    async with await RawClient.open(stomp_broker.port, "1.1") as c:
        await c.send("CONNECT", {"accept-version": "1.0,1.1,1.2"})
        frame = await c.expect("CONNECTED", version="1.1", server="TestBroker/9")
        assert frame


def test_in_thread_on_uvloop_stops_cleanly():
    with Broker.in_thread(backend="asyncio", backend_options={"use_uvloop": True}) as broker:
        port = broker.port
        c = SyncClient(port)
        c.send("CONNECT", {"accept-version": "1.2"})
        assert c.recv().command == "CONNECTED"
        start = time.monotonic()
    assert time.monotonic() - start < 2
    assert c.recv() is None  # closed by the shutdown
    c.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_argument_validation():
    with pytest.raises(ValueError):
        Broker(versions=("2.0",))
    with pytest.raises(ValueError):
        Broker(versions=())
    with pytest.raises(ValueError):
        Broker(heart_beat=(-1, 0))
    with pytest.raises(ValueError):
        Broker(nack="dead-letter")
    with pytest.raises(ValueError):  # the scanner's ConfigurationError, at construction
        Broker(max_frame_bytes=0)
    broker = Broker()
    with pytest.raises(RuntimeError):
        _ = broker.port
    with pytest.raises(RuntimeError):
        broker.wait_for_blocking(lambda: True)
    with pytest.raises(ValueError):
        broker.refuse_connections(-1)


def test_plugin_is_registered_as_a_pytest11_entry_point():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    assert eps.get("stompfast") == "stompfast.testing.pytest_plugin"


def test_plugin_import_is_light():
    code = (
        "import sys; import stompfast.testing.pytest_plugin\n"
        "heavy = ('stompfast.testing._broker', 'trio', 'uvloop', 'hypothesis')\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
