"""The in-process broker's session rules: negotiation, auth, receipts, ERROR on violations, heart-beats."""

from __future__ import annotations

import anyio
import pytest
from rawstomp import RawClient

from stompfast import __version__, encode_frame

pytestmark = pytest.mark.anyio

SERVER = f"stompfast-testing/{__version__}"


# ------------------------------------------------------------------ negotiation


@pytest.mark.parametrize("command", ["CONNECT", "STOMP"])
@pytest.mark.parametrize(
    "accept, expected",
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.2", "1.2"),
        ("1.0,1.1,1.2", "1.2"),
        ("1.0,1.1,2.0", "1.1"),
        ("1.2,1.0", "1.2"),
    ],
)
async def test_version_negotiation(stomp_broker, command, accept, expected):
    async with await RawClient.open(stomp_broker.port) as c:
        headers = {"host": "/"} if accept is None else {"accept-version": accept, "host": "/"}
        await c.send(command, headers)
        frame = await c.expect("CONNECTED")
        assert frame.header_list == [
            ("version", expected),
            ("session", "session-1"),
            ("server", SERVER),
            ("heart-beat", "0,0"),
        ]
        assert frame.body == b""


@pytest.mark.stomp_broker(versions=("1.0", "1.1"))
async def test_highest_common_version_of_a_limited_broker(stomp_broker):
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("CONNECT", {"accept-version": "1.1,1.2"})
        assert (await c.expect("CONNECTED")).headers["version"] == "1.1"


@pytest.mark.stomp_broker(versions=("1.0", "1.1"))
async def test_no_common_version_is_an_error_then_close(stomp_broker):
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("CONNECT", {"accept-version": "1.2,2.1"})
        frame = await c.expect_error("Supported protocol versions are 1.0 1.1", version="1.0,1.1")
        assert frame.headers["content-type"] == "text/plain"
        assert frame.body == b"Supported protocol versions are 1.0 1.1\n"


@pytest.mark.stomp_broker(versions=("1.2",))
async def test_no_accept_version_means_1_0(stomp_broker):
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("CONNECT", {"host": "/"})
        await c.expect_error("Supported protocol versions are 1.2", version="1.2")


async def test_sessions_are_unique_and_any_host_is_accepted(stomp_broker):
    sessions = []
    for host in ("/", "127.0.0.1", "some-vhost"):
        async with await RawClient.open(stomp_broker.port) as c:
            await c.send("CONNECT", {"accept-version": "1.2", "host": host})
            sessions.append((await c.expect("CONNECTED")).headers["session"])
    assert sessions == ["session-1", "session-2", "session-3"]


async def test_frames_pipelined_after_connect_use_the_negotiated_version(stomp_broker):
    # 1.0: padded header values are stripped; nothing is unescaped
    async with await RawClient.open(stomp_broker.port, "1.0") as c:
        await c.send_raw(
            b"CONNECT\nlogin:x\n\n\0"
            b"SUBSCRIBE\ndestination: /queue/pipe\n\n\0"
            b"SEND\ndestination:/queue/pipe\nx:a\\cb\nreceipt: r1\n\nhi\0"
        )
        assert (await c.expect("CONNECTED")).headers["version"] == "1.0"
        message = await c.expect("MESSAGE", destination="/queue/pipe", x="a\\cb")
        assert "subscription" not in message.headers  # a 1.0 subscription without id
        await c.expect("RECEIPT", receipt_id="r1")
    # 1.2: escapes are decoded
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send_raw(
            b"CONNECT\naccept-version:1.2\n\n\0"
            b"SUBSCRIBE\nid:0\ndestination:/queue/pipe2\n\n\0"
            b"SEND\ndestination:/queue/pipe2\nx:a\\cb\\nc\n\nhi\0"
        )
        assert (await c.expect("CONNECTED")).headers["version"] == "1.2"
        await c.expect("MESSAGE", destination="/queue/pipe2", x="a:b\nc")


# ------------------------------------------------------------------ authentication


@pytest.mark.stomp_broker(users={"guest": "guest"})
async def test_good_credentials_are_accepted(stomp_broker):
    async with await RawClient.connected(stomp_broker.port, login="guest", passcode="guest"):
        pass


@pytest.mark.stomp_broker(users={"guest": "guest"})
@pytest.mark.parametrize(
    "credentials, who",
    [
        ({"login": "guest", "passcode": "nope"}, "user 'guest'"),
        ({"login": "eve"}, "user 'eve'"),
        ({}, "no login"),
    ],
)
async def test_bad_credentials_are_refused(stomp_broker, credentials, who):
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("CONNECT", {"accept-version": "1.2", **credentials})
        frame = await c.expect_error("Bad CONNECT")
        assert frame.body == f"Access refused for {who}: bad login or passcode.\n".encode()
    assert stomp_broker.sessions == []


# ------------------------------------------------------------------ ERROR on violations


@pytest.mark.parametrize(
    "version, frames, message",
    [
        ("1.2", [("SEND", {})], "Missing destination header"),
        ("1.2", [("SEND", {"destination": "/nowhere/a"})], "Unknown destination"),
        ("1.2", [("SEND", {"destination": "/queue/"})], "Unknown destination"),
        ("1.2", [("SEND", {"destination": "/queue/a", "transaction": "t"})], "Unknown transaction"),
        ("1.2", [("SUBSCRIBE", {"id": "0"})], "Missing destination header"),
        ("1.1", [("SUBSCRIBE", {"destination": "/queue/a"})], "Missing id header"),
        ("1.2", [("SUBSCRIBE", {"id": "0", "destination": "/queue/a", "ack": "bogus"})], "Invalid ack mode"),
        ("1.2", [("SUBSCRIBE", {"id": "0", "destination": "/queue/a", "prefetch-count": "-1"})],
         "Invalid prefetch-count"),
        ("1.2", [("SUBSCRIBE", {"id": "0", "destination": "/queue/a", "activemq.prefetchSize": "x"})],
         "Invalid activemq.prefetchSize"),
        ("1.2", [("SUBSCRIBE", {"id": "0", "destination": "/queue/a"}),
                 ("SUBSCRIBE", {"id": "0", "destination": "/queue/b"})], "Duplicate subscription id"),
        ("1.2", [("UNSUBSCRIBE", {"id": "0"})], "Unknown subscription"),
        ("1.2", [("UNSUBSCRIBE", {})], "Missing id header"),
        ("1.2", [("ACK", {"id": "nope"})], "Unknown message"),
        ("1.2", [("ACK", {"message-id": "msg-1"})], "Missing id header"),
        ("1.1", [("ACK", {"message-id": "m", "subscription": "nope"})], "Unknown subscription"),
        ("1.1", [("ACK", {"message-id": "m"})], "Missing subscription header"),
        ("1.1", [("SUBSCRIBE", {"id": "0", "destination": "/queue/a"}),
                 ("NACK", {"message-id": "m", "subscription": "0"})], "Unknown message"),
        ("1.0", [("ACK", {"message-id": "m"})], "Unknown message"),
        ("1.0", [("ACK", {"message-id": "m", "subscription": "nope"})], "Unknown subscription"),
        ("1.0", [("NACK", {"message-id": "m"})], "Illegal command"),
        ("1.2", [("BEGIN", {})], "Missing transaction header"),
        ("1.2", [("BEGIN", {"transaction": "t"}), ("BEGIN", {"transaction": "t"})], "Duplicate transaction"),
        ("1.2", [("COMMIT", {"transaction": "t"})], "Unknown transaction"),
        ("1.2", [("ABORT", {"transaction": "t"})], "Unknown transaction"),
        ("1.2", [("BEGIN", {"transaction": "t"}), ("COMMIT", {"transaction": "t"}),
                 ("COMMIT", {"transaction": "t"})], "Unknown transaction"),
        ("1.2", [("MESSAGE", {"destination": "/queue/a"})], "Illegal command"),
        ("1.2", [("CONNECT", {"accept-version": "1.2"})], "Already connected"),
        ("1.2", [("STOMP", {"accept-version": "1.2"})], "Already connected"),
    ],
)
async def test_violation_gives_error_with_receipt_id_then_close(stomp_broker, version, frames, message):
    async with await RawClient.connected(stomp_broker.port, version) as c:
        *before, (command, headers) = frames
        for cmd, h in before:
            await c.send(cmd, h)
        # the failing frame carries a receipt; a frame after it must not be processed
        wire = encode_frame(command, {**headers, "receipt": "bad-1"}, version=version)
        wire += encode_frame("SEND", {"destination": "/queue/after"}, b"x", version=version)
        await c.send_raw(wire)
        frame = await c.expect_error(message, receipt_id="bad-1")
        assert frame.headers["content-type"] == "text/plain" and frame.body
    assert stomp_broker.queue_depth("/queue/after") == 0
    assert stomp_broker.errors == []


async def test_frames_before_connect_are_refused(stomp_broker):
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("SEND", {"destination": "/queue/a", "receipt": "r"}, b"x")
        frame = await c.expect_error("Illegal command", receipt_id="r")
        assert b"CONNECT" in frame.body
    assert stomp_broker.queue_depth("/queue/a") == 0


@pytest.mark.parametrize("value", ["10", " 1,0", "+5,0", "1_000,0", "\u0663,0", "-1,0", "1,2,3"])
async def test_invalid_heart_beat_header_is_refused(stomp_broker, value):
    # the spec's grammar: two integers of ASCII digits (int() alone takes most of these)
    async with await RawClient.open(stomp_broker.port) as c:
        await c.send("CONNECT", {"accept-version": "1.2", "heart-beat": value})
        await c.expect_error("Invalid heart-beat header")


async def test_malformed_bytes_give_error_after_the_good_frames(stomp_broker):
    async with await RawClient.connected(stomp_broker.port) as c:
        await c.send_raw(b"SEND\ndestination:/queue/ok\n\nfine\0" b"SEND\nbad\\xescape:1\n\n\0")
        frame = await c.expect_error("Malformed frame")
        assert b"escape" in frame.body
    assert stomp_broker.queue_depth("/queue/ok") == 1


@pytest.mark.stomp_broker(max_frame_bytes=1024)
async def test_frame_over_the_limit_is_refused(stomp_broker):
    async with await RawClient.connected(stomp_broker.port) as c:
        await c.send("SEND", {"destination": "/queue/big"}, b"x" * 2000)
        await c.expect_error("Frame too large", limit="max_frame_bytes=1024")
    assert stomp_broker.queue_depth("/queue/big") == 0


# ------------------------------------------------------------------ receipts and DISCONNECT


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
async def test_every_client_frame_gets_its_receipt(stomp_broker, version):
    async with await RawClient.connected(stomp_broker.port, version) as c:
        sub = {"id": "s", "destination": "/queue/r", "ack": "client-individual"}
        await c.receipt("SUBSCRIBE", sub, rid="1")
        await c.send("SEND", {"destination": "/queue/r", "receipt": "2"}, b"a")
        m = await c.expect("MESSAGE")
        await c.expect("RECEIPT", receipt_id="2")
        await c.receipt("ACK", _ack(version, m), rid="3")
        await c.receipt("BEGIN", {"transaction": "t"}, rid="4")
        await c.receipt("COMMIT", {"transaction": "t"}, rid="5")
        await c.receipt("BEGIN", {"transaction": "u"}, rid="6")
        await c.receipt("ABORT", {"transaction": "u"}, rid="7")
        if version != "1.0":
            await c.send("SEND", {"destination": "/queue/r"}, b"b")
            m = await c.expect("MESSAGE")
            await c.send("NACK", {**_ack(version, m), "receipt": "8"})
            # requeued and redelivered while the NACK is processed: before its receipt
            again = await c.expect("MESSAGE", redelivered="true")
            assert again.headers["message-id"] == m.headers["message-id"]
            await c.expect("RECEIPT", receipt_id="8")
        await c.receipt("UNSUBSCRIBE", {"id": "s"}, rid="9")
        await c.send("DISCONNECT", {"receipt": "10"})
        assert [f.headers for f in await c.expect_closed()] == [{"receipt-id": "10"}]


async def test_disconnect_closes_and_ignores_later_frames(stomp_broker):
    async with await RawClient.connected(stomp_broker.port) as c:
        await c.send_raw(
            encode_frame("DISCONNECT", {"receipt": "bye"})
            + encode_frame("SEND", {"destination": "/queue/late"}, b"x")
        )
        frames = await c.expect_closed()
        assert [(f.command, dict(f.headers)) for f in frames] == [("RECEIPT", {"receipt-id": "bye"})]
    await stomp_broker.wait_for(lambda: stomp_broker.connections == 0)
    assert stomp_broker.queue_depth("/queue/late") == 0


async def test_disconnect_without_receipt_closes_too(stomp_broker):
    async with await RawClient.connected(stomp_broker.port) as c:
        await c.send("DISCONNECT")
        assert await c.expect_closed() == []


async def test_client_closing_its_side_still_gets_the_last_receipt(stomp_broker):
    async with await RawClient.connected(stomp_broker.port) as c:
        await c.send("SEND", {"destination": "/queue/eof", "receipt": "last"}, b"x")
        await c.stream.send_eof()
        frames = await c.expect_closed()
        assert [f.headers.get("receipt-id") for f in frames] == ["last"]
    assert stomp_broker.queue_depth("/queue/eof") == 1


# ------------------------------------------------------------------ heart-beats


@pytest.mark.stomp_broker(heart_beat=(50, 0))
@pytest.mark.parametrize("client_cy, interval", [(50, 0.05), (100, 0.1)])
async def test_broker_sends_heart_beats_at_the_negotiated_interval(stomp_broker, client_cy, interval):
    c = await RawClient.connected(stomp_broker.port, heart_beat=f"0,{client_cy}")
    async with c:
        start = anyio.current_time()
        await c.read_for(0.36)
        expected = int(0.36 / interval)
        assert expected - 2 <= c.eols <= expected, (c.eols, expected)
        gaps = [b - a for a, b in zip([start] + c.eol_times, c.eol_times)]
        assert min(gaps[1:]) >= interval * 0.7, gaps
    assert stomp_broker.stats.heartbeats_out >= c.eols


@pytest.mark.stomp_broker(heart_beat=(50, 50))
async def test_no_heart_beats_when_the_client_wants_none(stomp_broker):
    async with await RawClient.connected(stomp_broker.port, heart_beat="0,0") as c:
        await c.read_for(0.2)
        assert c.eols == 0
        await c.sync()  # and it was not dropped either
    assert stomp_broker.stats.heartbeats_out == 0


@pytest.mark.stomp_broker(heart_beat=(0, 50))
async def test_silent_client_is_dropped_after_twice_its_interval_plus_grace(stomp_broker):
    c = await RawClient.open(stomp_broker.port)
    async with c:
        await c.send("CONNECT", {"accept-version": "1.2", "heart-beat": "40,0"})
        connected = await c.expect("CONNECTED")
        assert connected.headers["heart-beat"] == "0,50"
        start = anyio.current_time()
        frame = await c.expect_error("Heart-beat timeout")
        elapsed = anyio.current_time() - start
        # 2 * max(40, 50) ms + 100 ms grace
        assert 0.19 <= elapsed < 0.6, elapsed
        assert b"50 ms" in frame.body


@pytest.mark.stomp_broker(heart_beat=(0, 50))
async def test_heart_beating_client_is_kept(stomp_broker):
    async with await RawClient.connected(stomp_broker.port, heart_beat="50,0") as c:
        for _ in range(12):
            await anyio.sleep(0.045)
            await c.send_raw(b"\n")
        await c.sync()
        assert stomp_broker.stats.heartbeats_in >= 10


@pytest.mark.stomp_broker(heart_beat=(0, 50))
async def test_client_that_cannot_heart_beat_is_never_dropped(stomp_broker):
    async with await RawClient.connected(stomp_broker.port, heart_beat="0,0") as c:
        await anyio.sleep(0.3)
        await c.sync()


def _ack(version, message):
    from rawstomp import ack_headers

    return ack_headers(version, message)
