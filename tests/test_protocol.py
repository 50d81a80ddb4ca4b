"""The sans-I/O session core: frames built, events produced, rules per version."""

from __future__ import annotations

import ast
import pathlib

import pytest

import stompfast._brokers as brokers_module
import stompfast._events as events_module
import stompfast._protocol as protocol_module
import stompfast._protocol_encoder as encoder_module
import stompfast._protocol_errors as errors_module
import stompfast._protocol_handshake as handshake_module
import stompfast._protocol_rules as rules_module
import stompfast._protocol_states as states_module
import stompfast._protocol_subscriptions as subscriptions_module
import stompfast._protocol_transactions as transactions_module
from stompfast import Frame, FrameScanner, encode_frame
from stompfast._protocol import (
    MAX_HEART_BEAT_MS,
    PREFETCH_HEADERS,
    TRANSITIONS,
    Connected,
    ErrorReceived,
    Message,
    OversizedMessage,
    ReceiptReceived,
    SessionState,
    StompProtocol,
    negotiate_heart_beat,
)
from stompfast.errors import (
    AlreadySettledError,
    AuthenticationError,
    ConfigurationError,
    LocalProtocolError,
    MessageTooLargeError,
    RemoteProtocolError,
    ServerError,
    StaleMessageError,
)


@pytest.mark.parametrize(
    "module",
    [protocol_module, states_module, rules_module, encoder_module, errors_module, handshake_module,
     subscriptions_module, transactions_module, events_module, brokers_module],
    ids=["_protocol", "_protocol_states", "_protocol_rules", "_protocol_encoder", "_protocol_errors",
         "_protocol_handshake", "_protocol_subscriptions", "_protocol_transactions", "_events", "_brokers"],
)
def test_protocol_core_imports_no_io(module):
    # the protocol core is sans-I/O: it never imports anyio, asyncio, socket or time
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & {"anyio", "asyncio", "socket", "time", "trio", "selectors", "threading"}, imported


def parse(data: bytes) -> Frame:
    (frame,) = FrameScanner(version="1.2").feed(data)
    return frame


def connected(version="1.2", heart_beat=(0, 0), server_hb="0,0", **kwargs) -> StompProtocol:
    p = StompProtocol(heart_beat=heart_beat, **kwargs)
    p.connect()
    headers = {"session": "s-1", "server": "test/1", "heart-beat": server_hb}
    if version != "1.0":
        headers["version"] = version
    (event,) = p.receive_data(encode_frame("CONNECTED", headers))
    assert isinstance(event, Connected)
    return p


def message(p: StompProtocol, sub="1", mid="m-1", ack="a:1", body=b"x", **extra) -> Message:
    headers = {"destination": "/queue/a", "message-id": mid, "subscription": sub, **extra}
    if ack is not None:
        headers["ack"] = ack
    (event,) = p.receive_data(encode_frame("MESSAGE", headers, body, version=p.version))
    assert isinstance(event, Message)
    return event


# -- CONNECT ---------------------------------------------------------------------------


def test_connect_frame_defaults():
    p = StompProtocol(login="guest", passcode="pa:ss")
    f = parse(p.connect())
    assert f.command == "CONNECT"
    # host "/" is RabbitMQ's default vhost and ignored by ActiveMQ/Artemis
    assert f.header_list == [
        ("accept-version", "1.0,1.1,1.2"),
        ("host", "/"),
        ("login", "guest"),
        ("passcode", "pa:ss"),  # CONNECT is never escaped: the raw colon stays
    ]
    assert p.state is SessionState.CONNECTING


def test_connect_with_stomp_command_heart_beat_and_extra_headers():
    p = StompProtocol(versions=["1.1", "1.2"], heart_beat=(500, 1000), use_stomp_command=True,
                      host="vh", connect_headers={"client-id": "c1", "host": "ignored"})
    f = parse(p.connect())
    assert f.command == "STOMP"
    assert dict(f.headers) == {"accept-version": "1.1,1.2", "host": "vh", "heart-beat": "500,1000", "client-id": "c1"}


def test_connect_for_1_0_only_sends_no_accept_version_and_refuses_stomp_command():
    f = parse(StompProtocol(versions="1.0", host=None).connect())
    assert f.header_list == []
    with pytest.raises(ConfigurationError):
        StompProtocol(versions=["1.0"], use_stomp_command=True)


@pytest.mark.parametrize("kwargs", [
    {"versions": []}, {"versions": ["2.0"]}, {"heart_beat": (1,)}, {"heart_beat": (-1, 0)}, {"heart_beat": (1.5, 0)},
])
def test_bad_settings_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        StompProtocol(**kwargs)


def test_connect_twice_is_refused():
    p = StompProtocol()
    p.connect()
    with pytest.raises(LocalProtocolError):
        p.connect()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connected_negotiates_version_server_session(version):
    p = connected(version)
    assert (p.version, p.server, p.session, p.state) == (version, "test/1", "s-1", SessionState.CONNECTED)


def test_connected_with_a_version_we_did_not_offer_fails():
    p = StompProtocol(versions=["1.1"])
    p.connect()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(encode_frame("CONNECTED", {"version": "1.2"}))
    assert p.state is SessionState.FAILED


def test_error_in_answer_to_connect_is_an_authentication_error():
    p = StompProtocol()
    p.connect()
    (event,) = p.receive_data(encode_frame("ERROR", {"message": "Bad CONNECT"}, b"Access refused for user 'x'"))
    assert isinstance(event, ErrorReceived)
    assert type(event.error) is AuthenticationError
    assert "Bad CONNECT" in str(event.error) and "Access refused" in str(event.error)
    assert p.state is SessionState.FAILED


@pytest.mark.parametrize(
    "client, server, expected",
    [
        ((0, 0), "1000,1000", (0, 0)),
        ((500, 500), None, (0, 0)),  # a missing header is "0,0"
        ((500, 1000), "1000,1000", (1000, 1000)),  # MAX(cx, sy), MAX(sx, cy)
        ((4000, 0), "0,200", (4000, 0)),
        ((100, 300), "200,0", (0, 300)),
        ((0, 5000), "10000,10000", (0, 10000)),
    ],
)
def test_heart_beat_negotiation_follows_the_spec(client, server, expected):
    assert negotiate_heart_beat(client, server) == expected


@pytest.mark.parametrize(
    "header",
    [
        "x", "1,2,3", "-1,0", "a,b", ",", "1,", ",1",
        # int() takes all of these; the spec's integers are ASCII digits only
        "\u0663,1",  # ARABIC-INDIC DIGIT THREE
        "1,\uff15",  # FULLWIDTH DIGIT FIVE
        "\u00b2,1",  # SUPERSCRIPT TWO (str.isdigit() takes it, int() does not)
        "1_000,0", "+5,0", "0,+5", " 5,0", "5 ,0", "5, 0", "5,0 ", "\t5,0", "5,0\n", "5.0,0", "0x10,0",
    ],
)
def test_invalid_server_heart_beat_is_a_remote_error_naming_the_header(header):
    with pytest.raises(RemoteProtocolError, match="heart-beat"):
        negotiate_heart_beat((1000, 1000), header)


def test_a_long_invalid_heart_beat_header_is_shortened_in_the_message():
    with pytest.raises(RemoteProtocolError) as info:
        negotiate_heart_beat((1000, 1000), "1," + "x" * 10_000)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    "header, expected",
    [
        ("99999999999,1", (1000, MAX_HEART_BEAT_MS)),  # was a liveness deadline ~9.5 years out
        ("1,99999999999", (MAX_HEART_BEAT_MS, 1000)),
        ("3600001,3600001", (MAX_HEART_BEAT_MS, MAX_HEART_BEAT_MS)),
        ("3600000,3600000", (MAX_HEART_BEAT_MS, MAX_HEART_BEAT_MS)),
        ("3599999,0", (0, 3599999)),
        ("1" * 5000 + ",0", (0, MAX_HEART_BEAT_MS)),  # longer than int() converts by default
        ("0010,0002", (1000, 1000)),  # leading zeros are still digits
    ],
)
def test_server_heart_beat_above_the_cap_is_clamped(header, expected):
    assert MAX_HEART_BEAT_MS == 3_600_000  # one hour, as documented
    assert negotiate_heart_beat((1000, 1000), header) == expected


def test_a_huge_server_heart_beat_no_longer_means_years_of_tolerated_silence():
    p = connected(heart_beat=(1000, 1000), server_hb="99999999999,1")
    assert p.receive_interval() == 3600.0
    assert p.peer_silent_too_long(0.0, 3 * 3600.0 + 1, tolerance=3.0)


def test_negotiated_heart_beat_is_exposed_and_silence_arithmetic():
    p = connected(heart_beat=(500, 1000), server_hb="1000,2000")
    assert p.heart_beat == (2000, 1000)
    assert (p.send_interval(), p.receive_interval()) == (2.0, 1.0)
    assert not p.peer_silent_too_long(10.0, 12.9, tolerance=3.0)
    assert p.peer_silent_too_long(10.0, 13.1, tolerance=3.0)
    assert not connected().peer_silent_too_long(0.0, 1e9, tolerance=3.0)  # no beats agreed


# -- frames before and after CONNECTED --------------------------------------------------


def test_send_before_connected_is_refused():
    p = StompProtocol()
    with pytest.raises(LocalProtocolError):
        p.send("/queue/a", b"x")
    p.connect()
    with pytest.raises(LocalProtocolError):
        p.send("/queue/a", b"x")


def test_message_before_connected_is_a_remote_error():
    p = StompProtocol()
    p.connect()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(encode_frame("MESSAGE", {"subscription": "1", "message-id": "1", "destination": "/q"}))


def test_client_frame_from_the_broker_is_a_remote_error():
    p = connected()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(encode_frame("SEND", {"destination": "/q"}))
    assert p.state is SessionState.FAILED


def test_transition_table_covers_every_state():
    assert {state for state, _ in TRANSITIONS} == set(SessionState)


# -- SEND --------------------------------------------------------------------------------


def test_send_escapes_per_version_and_adds_content_length():
    p = connected("1.2")
    data, receipt = p.send("/queue/a", b"hi", {"k": "a:b"}, content_type="text/plain", receipt=True)
    f = parse(data)
    assert f.header_list == [
        ("destination", "/queue/a"), ("content-type", "text/plain"), ("receipt", receipt), ("k", "a:b"),
        ("content-length", "2"),
    ]
    assert b"k:a\\cb\n" in data
    p10 = connected("1.0")
    data, _ = p10.send("/queue/a", b"hi", {"k": "a:b"})
    assert b"k:a:b\n" in data  # 1.0 has no escaping


def test_user_headers_do_not_override_destination_or_receipt():
    p = connected()
    data, rid = p.send("/queue/a", b"", {"destination": "/queue/other", "receipt": "mine"}, receipt=True)
    assert parse(data).headers["destination"] == "/queue/a"
    assert parse(data).headers["receipt"] == rid


def test_receipt_ids_are_unique_and_receipt_events_arrive():
    p = connected()
    ids = [p.send("/q", b"", receipt=True)[1] for _ in range(5)]
    assert len(set(ids)) == 5
    events = p.receive_data(b"".join(encode_frame("RECEIPT", {"receipt-id": r}) for r in reversed(ids)))
    assert [e.receipt_id for e in events] == list(reversed(ids))
    assert all(isinstance(e, ReceiptReceived) for e in events)


def test_error_mid_session_carries_receipt_id_and_fails_the_session():
    p = connected()
    _, rid = p.send("/q", b"", receipt=True)
    (event,) = p.receive_data(encode_frame("ERROR", {"message": "no", "receipt-id": rid}, b"details"))
    assert type(event.error) is ServerError
    assert (event.receipt_id, event.error.body, event.error.headers["message"]) == (rid, b"details", "no")
    assert p.state is SessionState.FAILED
    # a frame asked for now is refused with the reason the session ended
    with pytest.raises(ServerError, match="^no: details$"):
        p.send("/q", b"")


# -- SUBSCRIBE / ACK / NACK per version ---------------------------------------------------------


def test_subscribe_ids_and_headers():
    p = connected()
    data, sub, rid = p.subscribe("/queue/a", ack="client", headers={"prefetch-count": 5, "id": "nope"}, receipt=True)
    assert sub == "1"
    assert parse(data).header_list == [
        ("destination", "/queue/a"), ("id", "1"), ("ack", "client"), ("receipt", rid), ("prefetch-count", "5")
    ]
    assert p.subscribe("/queue/b")[1] == "2"
    with pytest.raises(LocalProtocolError):
        p.subscribe("/queue/c", id="1")
    with pytest.raises(ConfigurationError):
        p.subscribe("/queue/c", ack="sometimes")


def test_client_individual_needs_1_1():
    with pytest.raises(LocalProtocolError):
        connected("1.0").subscribe("/q", ack="client-individual")


@pytest.mark.parametrize(
    "version, expected",
    [
        ("1.0", {"message-id": "m:1"}),
        ("1.1", {"message-id": "m:1", "subscription": "1"}),
        ("1.2", {"id": "ack:42"}),
    ],
)
def test_ack_headers_per_version(version, expected):
    p = connected(version)
    p.subscribe("/queue/a", ack="client-individual" if version != "1.0" else "client")
    msg = message(p, mid="m:1", ack="ack:42" if version == "1.2" else None)
    data, _ = p.ack(msg)
    assert dict(parse(data).headers) == expected
    if version != "1.0":
        again = message(p, mid="m:1", ack="ack:42" if version == "1.2" else None)  # (msg is settled now)
        data, _ = p.nack(again, receipt=True)
        f = parse(data)
        assert f.command == "NACK" and {k: v for k, v in f.headers.items() if k != "receipt"} == expected


_ACK_IDS_12 = [
    "T_1@@session-Xy@@42", "ID:host-1234-1700000000000-3:1:1:1:7", "a\\b", "line\nbreak\r", "\u00e9t\u00e9:\\"
]


@pytest.mark.parametrize(
    "version, ack_id",
    [("1.0", "T_1@@session-Xy@@42"), ("1.1", "T_1@@session-Xy@@42")] + [("1.2", a) for a in _ACK_IDS_12],
)
def test_ack_plain_builds_exactly_what_ack_builds(version, ack_id):
    p = connected(version)
    p.subscribe("/queue/a", ack="client-individual" if version != "1.0" else "client")
    def fresh() -> Message:  # (each ACK settles its message)
        return message(p, mid="m" + ack_id, ack=ack_id if version == "1.2" else None)

    assert p.ack_plain(fresh()) == p.ack(fresh())[0]
    msg = fresh()
    assert parse(p.ack_plain(msg)).headers.get("id" if version == "1.2" else "message-id") == msg.ack_id
    with pytest.raises(AlreadySettledError):
        p.ack_plain(msg)


def test_ack_plain_refuses_what_ack_refuses():
    p = connected()
    p.subscribe("/q")  # ack auto
    msg = message(p)
    with pytest.raises(LocalProtocolError):
        p.ack_plain(msg)
    p.unsubscribe("1")
    with pytest.raises(LocalProtocolError):  # its subscription is gone
        p.ack_plain(msg)
    old = connected()
    old.subscribe("/q", ack="client")
    stale = message(old)
    new = connected()
    new.subscribe("/q", ack="client")
    with pytest.raises(StaleMessageError):
        new.ack_plain(stale)
    p = connected()
    p.subscribe("/q", ack="client")
    msg = message(p)
    p.disconnect()
    with pytest.raises(LocalProtocolError):
        p.ack_plain(msg)


def test_nack_does_not_exist_on_1_0():
    p = connected("1.0")
    p.subscribe("/q", ack="client")
    with pytest.raises(LocalProtocolError):
        p.nack(message(p, ack=None))


def test_ack_in_auto_mode_and_for_unknown_subscription_is_refused():
    p = connected()
    p.subscribe("/q")
    msg = message(p)
    with pytest.raises(LocalProtocolError):
        p.ack(msg)
    p.unsubscribe("1")
    with pytest.raises(LocalProtocolError):
        p.ack(msg)


def test_ack_of_a_message_from_another_session_is_stale():
    old = connected()
    old.subscribe("/q", ack="client")
    msg = message(old)
    new = connected()
    new.subscribe("/q", ack="client")
    with pytest.raises(StaleMessageError):
        new.ack(msg)


def test_message_without_subscription_header_is_a_remote_error():
    p = connected()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(encode_frame("MESSAGE", {"message-id": "1", "destination": "/q"}))


def test_message_properties():
    p = connected()
    p.subscribe("/q")
    msg = message(p, body="héllo".encode(), **{"content-type": "text/plain", "redelivered": "true"})
    assert (msg.destination, msg.subscription, msg.message_id, msg.ack_id) == ("/queue/a", "1", "m-1", "a:1")
    assert (msg.text, msg.content_type, msg.redelivered) == ("héllo", "text/plain", True)
    assert msg.headers["destination"] == "/queue/a"
    with pytest.raises(LocalProtocolError):
        msg.ack()  # not attached to a client subscription


def test_unsubscribe_of_unknown_id_is_refused_locally():
    # an UNSUBSCRIBE of an unknown id makes brokers send ERROR: never send one
    with pytest.raises(LocalProtocolError):
        connected().unsubscribe("9")


# -- transactions, probe, DISCONNECT ----------------------------------------------------------


def test_transactions():
    p = connected()
    data, tx, _ = p.begin()
    assert parse(data).header_list == [("transaction", tx)]
    data, _ = p.send("/q", b"x", transaction=tx)
    assert parse(data).headers["transaction"] == tx
    with pytest.raises(LocalProtocolError):
        p.send("/q", b"x", transaction="other")
    data, rid = p.commit(tx, receipt=True)
    assert dict(parse(data).headers) == {"transaction": tx, "receipt": rid}
    with pytest.raises(LocalProtocolError):
        p.abort(tx)  # no longer open


def test_probe_is_begin_then_abort_with_a_receipt():
    p = connected()
    data, rid = p.probe()
    frames = FrameScanner().feed(data)
    assert [f.command for f in frames] == ["BEGIN", "ABORT"]
    assert frames[0].headers["transaction"] == frames[1].headers["transaction"]
    assert frames[1].headers["receipt"] == rid


def test_disconnect_receipt_closes_the_session():
    p = connected()
    data, rid = p.disconnect()
    assert parse(data).header_list == [("receipt", rid)]
    assert p.state is SessionState.DISCONNECTING
    with pytest.raises(LocalProtocolError):
        p.send("/q", b"")
    p.receive_data(encode_frame("RECEIPT", {"receipt-id": rid}))
    assert p.state is SessionState.CLOSED


def test_version_switch_reaches_the_scanner():
    # on 1.1, \r is not an escape: an ERROR carrying it must fail framing
    p = connected("1.1")
    with pytest.raises(RemoteProtocolError):
        p.receive_data(b"RECEIPT\nreceipt-id:a\\rb\n\n\x00")
    p2 = connected("1.2")
    (event,) = p2.receive_data(b"RECEIPT\nreceipt-id:a\\rb\n\n\x00")
    assert event.receipt_id == "a\rb"


def test_framing_fault_keeps_the_events_before_it():
    p = connected()
    p.subscribe("/q")
    good = encode_frame("MESSAGE", {"subscription": "1", "message-id": "1", "destination": "/q"}, b"ok")
    with pytest.raises(RemoteProtocolError) as info:
        p.receive_data(good + b"BOGUS\n\n\x00")
    (event,) = info.value.events
    assert event.body == b"ok"
    assert p.state is SessionState.FAILED


def test_session_fault_mid_read_keeps_the_events_before_it():
    # Not a framing fault but a session one (a client frame from the broker): the
    # MESSAGE before it in the same read still reaches the caller.
    p = connected()
    p.subscribe("/q")
    good = encode_frame("MESSAGE", {"subscription": "1", "message-id": "1", "destination": "/q"}, b"ok")
    with pytest.raises(RemoteProtocolError) as info:
        p.receive_data(good + encode_frame("SEND", {"destination": "/q"}))
    (event,) = info.value.events
    assert event.body == b"ok"
    assert p.state is SessionState.FAILED


def _one_read(p: StompProtocol, *tail: bytes) -> bytes:
    """MESSAGE, RECEIPT (for a real receipt) and a broker ERROR, then ``tail``, as one read."""
    _, rid = p.send("/q", b"", receipt=True)
    return b"".join(
        [
            encode_frame("MESSAGE", {"subscription": "1", "message-id": "7", "destination": "/q"}, b"before"),
            encode_frame("RECEIPT", {"receipt-id": rid}),
            encode_frame("ERROR", {"message": "Invalid transaction id"}, b"tx9"),
            *tail,
        ]
    )


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param([], id="nothing"),
        pytest.param(
            [encode_frame("MESSAGE", {"subscription": "1", "message-id": "8", "destination": "/q"})], id="message"
        ),
        pytest.param([encode_frame("RECEIPT", {"receipt-id": "r99"}), b"\n\n"], id="receipt"),
        pytest.param([encode_frame("CONNECTED", {"version": "1.2"})], id="connected"),
        pytest.param([b"BOGUS\n\n\x00"], id="framing-fault"),
        pytest.param([b"MESSAGE\nsubscription:1\n\n" + b"x" * 1000], id="unfinished"),
    ],
)
def test_error_in_one_read_delivers_what_came_before_and_ignores_what_follows(tail):
    # ActiveMQ answers a bad SEND with ERROR and goes on delivering on the same
    # connection: the MESSAGE and RECEIPT before the ERROR are events, the ERROR is
    # reported as the broker's ServerError, and whatever follows is ignored, in
    # this read and later ones.
    p = connected()
    p.subscribe("/q")
    events = p.receive_data(_one_read(p, *tail))
    assert [type(e) for e in events] == [Message, ReceiptReceived, ErrorReceived]
    assert events[0].body == b"before"
    assert type(events[2].error) is ServerError and "Invalid transaction id" in str(events[2].error)
    assert p.state is SessionState.FAILED
    more = encode_frame("MESSAGE", {"subscription": "1", "message-id": "9", "destination": "/q"})
    assert p.receive_data(more) == [] and p.receive_data(b"garbage\x00") == []


def test_error_answering_connect_followed_by_frames_is_the_authentication_error():
    p = StompProtocol()
    p.connect()
    data = encode_frame("ERROR", {"message": "Bad CONNECT"}, b"Access refused") + encode_frame(
        "MESSAGE", {"subscription": "1", "message-id": "1"}
    )
    (event,) = p.receive_data(data)
    assert type(event.error) is AuthenticationError
    assert p.receive_data(encode_frame("CONNECTED", {"version": "1.2"})) == []


# -- more than one ERROR before the broker closes (RabbitMQ 4.x: the reason comes second) --------

_PROCESSING = encode_frame("ERROR", {"message": "Processing error"}, b"Processing error")
_REASON = encode_frame("ERROR", {"message": "Feature transient_nonexcl_queues is deprecated"}, b"see the docs")


@pytest.mark.parametrize("apart", [False, True], ids=["one-read", "two-reads"])
def test_every_error_before_the_close_is_folded_into_the_ending_error(apart):
    p = connected()
    p.subscribe("/q")
    if apart:
        (event,) = p.receive_data(_PROCESSING)
        assert p.reading_errors and str(event.error) == "Processing error"
        assert p.receive_data(_REASON) == []
    else:
        (event,) = p.receive_data(_PROCESSING + _REASON)
    error = p.ending_error
    assert type(error) is ServerError
    assert str(error) == "Processing error; then ERROR: Feature transient_nonexcl_queues is deprecated: see the docs"
    # the first frame's own data stays the error's; each frame is kept
    assert error.headers["message"] == "Processing error" and error.body == b"Processing error"
    assert [str(e) for e in error.errors] == [
        "Processing error", "Feature transient_nonexcl_queues is deprecated: see the docs"
    ]
    assert p.state is SessionState.FAILED and p.reading_errors


def test_later_errors_answering_connect_keep_the_authentication_error_class():
    p = StompProtocol()
    p.connect()
    p.receive_data(encode_frame("ERROR", {"message": "Bad CONNECT"}, b"Access refused"))
    p.receive_data(encode_frame("MESSAGE", {"subscription": "1", "message-id": "1"}) + _REASON)
    error = p.ending_error
    assert type(error) is AuthenticationError and all(type(e) is AuthenticationError for e in error.errors)
    assert str(error) == (
        "Bad CONNECT: Access refused; then ERROR: Feature transient_nonexcl_queues is deprecated: see the docs"
    )


def test_an_error_storm_keeps_eight_errors_and_counts_the_rest():
    p = connected()
    p.receive_data(b"".join(encode_frame("ERROR", {"message": f"storm {i}"}) for i in range(5000)))
    p.receive_data(b"".join(encode_frame("ERROR", {"message": f"storm {i}"}) for i in range(5000, 10_000)))
    error = p.ending_error
    assert len(error.errors) == 8 and str(error.errors[-1]) == "storm 7"
    assert str(error).endswith("storm 7 (and 9,992 more ERROR frames)")


def test_a_framing_fault_after_the_error_ends_the_reading_of_later_errors():
    p = connected()
    p.receive_data(_PROCESSING)
    # the ERROR before the fault in the same read still counts; nothing after it can be framed
    assert p.receive_data(_REASON + b"BOGUS\n\n\x00" + _REASON) == []
    assert not p.reading_errors
    assert len(p.ending_error.errors) == 2
    p.receive_data(_REASON)
    assert len(p.ending_error.errors) == 2


def test_a_frame_asked_for_after_an_ending_error_raises_that_error_not_a_local_one():
    # A driver fails its caller only once the later ERRORs are read; a frame asked for
    # meanwhile must report why the session ended, folded as far as it got.
    p = connected()
    p.subscribe("/q")
    (event,) = p.receive_data(_PROCESSING)
    with pytest.raises(ServerError, match="^Processing error$"):
        p.send_plain("/q", b"x")
    p.receive_data(_REASON)
    for ask in (lambda: p.send("/q", b"x", receipt=True), p.probe, p.begin, lambda: p.subscribe("/r"),
                lambda: p.disconnect(receipt=True)):
        with pytest.raises(ServerError) as info:
            ask()
        assert type(info.value) is ServerError and info.value is not p.ending_error
        assert str(info.value) == str(p.ending_error) and len(info.value.errors) == 2


def test_a_frame_asked_for_after_a_local_failure_is_a_local_protocol_error():
    p = connected()
    with pytest.raises(RemoteProtocolError):
        p.receive_data(encode_frame("CONNECTED", {"version": "1.2"}))
    with pytest.raises(LocalProtocolError, match="cannot send SEND while the session is failed"):
        p.send_plain("/q", b"x")


def test_an_ending_error_alone_is_the_error_of_its_event():
    p = connected()
    (event,) = p.receive_data(_PROCESSING)
    assert p.ending_error is event.error and event.error.errors == ()
    assert p.receive_data(b"\n\n") == [] and p.ending_error is event.error


def test_a_second_connected_names_the_state_it_arrived_in():
    p = connected()
    with pytest.raises(RemoteProtocolError, match="CONNECTED while the session is connected"):
        p.receive_data(encode_frame("CONNECTED", {"version": "1.2"}))
    assert p.state is SessionState.FAILED


@pytest.mark.parametrize("how", ["framing", "session", "error-frame"])
def test_a_failed_session_is_freed_by_reference_counting(how):
    # A failed session must not live on in a reference cycle (through the
    # traceback of an exception it keeps) until a rare full collection: with
    # reconnecting on, each one held up to max_frame_bytes of scanner buffer.
    import gc
    import weakref

    gc.disable()
    try:
        p = connected(max_frame_bytes=1024)
        p.subscribe("/q")
        alive = weakref.ref(p)
        bad = {
            "framing": b"MESSAGE\nsubscription:1\n\n" + b"x" * 5000,
            "session": encode_frame("SEND", {"destination": "/q"}),
            "error-frame": encode_frame("ERROR", {"message": "no"}),
        }[how]
        try:
            p.receive_data(bad)
        except RemoteProtocolError:
            pass
        assert p.state is SessionState.FAILED
        del p
        assert alive() is None
    finally:
        gc.enable()


def test_rabbitmq_1_0_sessions_are_framed_with_1_1_escaping():
    # RabbitMQ escapes ':' as \c even on 1.0 and reads a raw backslash as an escape
    p = StompProtocol(versions=["1.0"])
    p.connect()
    p.receive_data(encode_frame("CONNECTED", {"session": "s", "server": "RabbitMQ/3.10.8"}))
    assert p.version == "1.0"
    data, _ = p.send("/q", b"", {"k": "a:b\\c"})
    assert b"k:a\\cb\\\\c\n" in data
    p.subscribe("/q")
    (msg,) = p.receive_data(b"MESSAGE\nsubscription:1\nmessage-id:1\ndestination:/q\nk:a\\cb\n\n\x00")
    assert msg.headers["k"] == "a:b"
    # ActiveMQ unescapes what it receives on 1.0 but sends raw
    amq = StompProtocol(versions=["1.0"])
    amq.connect()
    amq.receive_data(encode_frame("CONNECTED", {"session": "s", "server": "ActiveMQ/5.17.2"}))
    assert b"k:a\\cb\\\\c\n" in amq.send("/q", b"", {"k": "a:b\\c"})[0]
    amq.subscribe("/q")
    (msg,) = amq.receive_data(b"MESSAGE\nsubscription:1\nmessage-id:1\ndestination:/q\nk:a:b\\c\n\n\x00")
    assert msg.headers["k"] == "a:b\\c"
    # any other 1.0 broker: no escaping at all
    other = connected("1.0")
    assert b"k:a:b\\c\n" in other.send("/q", b"", {"k": "a:b\\c"})[0]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("content_type", [None, "text/plain;charset=utf-8"])
@pytest.mark.parametrize("body", [b"", b"x", b"\x00" * 300])
def test_the_cached_send_head_builds_exactly_what_encode_frame_builds(version, content_type, body):
    p = connected(version)
    for _ in range(2):  # built, then taken from the cache
        data, receipt = p.send("/queue/a:b", body, content_type=content_type)
        headers = {"destination": "/queue/a:b"}
        if content_type:
            headers["content-type"] = content_type
        assert data == encode_frame("SEND", headers, body, version=version)
        assert receipt is None
    for _ in range(2):  # with a receipt, the receipt line comes from the same fast path
        data, receipt = p.send("/queue/a:b", body, content_type=content_type, receipt=True)
        headers = {"destination": "/queue/a:b"}
        if content_type:
            headers["content-type"] = content_type
        headers["receipt"] = receipt
        assert receipt is not None and receipt.startswith("r")
        assert data == encode_frame("SEND", headers, body, version=version)
    assert p.send("/q", b"", receipt=True)[1] != p.send("/q", b"", receipt=True)[1]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_send_plain_builds_exactly_what_send_builds(version):
    p = connected(version)
    # lengths change and repeat (the cached content-length line), a destination
    # with characters to escape, an empty body, and heads first built by send()
    for destination, body in [("/queue/a:b", b"x"), ("/queue/a:b", b"x"), ("/q", b"\x00" * 300),
                              ("/q", b""), ("/queue/a:b", b"yy"), ("/t\\b", b"z"), ("/q", b"x")]:
        expected = encode_frame("SEND", {"destination": destination}, body, version=version)
        assert p.send_plain(destination, body) == expected
        assert p.send(destination, body)[0] == expected
    p.send("/only-via-send", b"a", content_type="text/plain")
    expected = encode_frame("SEND", {"destination": "/only-via-send"}, b"a", version=version)
    assert p.send_plain("/only-via-send", b"a") == expected


def test_send_plain_is_refused_outside_a_session():
    p = StompProtocol()
    with pytest.raises(LocalProtocolError):
        p.send_plain("/q", b"x")
    p = connected()
    p.disconnect()
    with pytest.raises(LocalProtocolError):
        p.send_plain("/q", b"x")


def test_send_head_cache_is_bounded():
    p = connected()
    for i in range(3000):
        p.send(f"/queue/{i}", b"x")
        p.send_plain(f"/queue/plain/{i}", b"x")
    assert len(p._send_heads) <= 1024
    assert len(p._plain_heads) <= 1024


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_encode_send_builds_what_send_builds_with_a_receipt(version):
    # The blocking client's threads encode their receipted SENDs with encode_send
    # (no shared cache touched): the bytes must be send()'s for the same arguments.
    p = connected(version)
    cases = [
        ("/queue/a:b", b"x", None, None),
        ("/q", b"", None, "text/plain"),
        ("/q", b"\x00" * 300, {"x-id": "1", "destination": "/ignored", "receipt": "ignored"}, None),
        ("/t\\b", b"z", {"k:colon": "v\\back"}, "application/json"),
    ]
    for destination, body, headers, content_type in cases:
        try:
            data, receipt_id = p.send(destination, body, headers, content_type=content_type, receipt=True)
        except LocalProtocolError as refused:  # 1.0 cannot escape ':' in a header name: refused alike
            with pytest.raises(type(refused)):
                p.encode_send(destination, body, headers, content_type, "t1")
            continue
        assert p.encode_send(destination, body, headers, content_type, receipt_id) == data
    state = (p._receipts, dict(p._send_heads), p._last_length)
    p.encode_send("/fresh", b"abc", None, None, "t1")
    assert (p._receipts, dict(p._send_heads), p._last_length) == state  # nothing shared was changed


def test_encode_send_is_refused_outside_a_session():
    p = StompProtocol()
    with pytest.raises(LocalProtocolError):
        p.encode_send("/q", b"x", None, None, "t1")


# -- ERRORs after which the broker keeps the session ------------------------------------------


def _connected_to(server: str) -> StompProtocol:
    p = StompProtocol(heart_beat=(0, 0))
    p.connect()
    p.receive_data(encode_frame("CONNECTED", {"version": "1.2", "server": server, "heart-beat": "0,0"}))
    p.subscribe("/q")
    return p


@pytest.mark.parametrize(
    "server, headers, kept",
    [
        ("RabbitMQ/3.10.8", {"message": "Subscription not found"}, True),
        ("RabbitMQ/3.10.8", {"message": "Unknown destination"}, False),
        ("RabbitMQ/3.10.8", {"message": "Invalid header", "receipt-id": "r1"}, False),
        ("ActiveMQ/5.17.2", {"message": "Invalid transaction id: t", "receipt-id": "r1"}, True),
        ("ActiveMQ/5.17.2", {"message": "Unexpected ACK received for message-id [x]"}, False),
        ("ActiveMQ/5.17.2", {"message": "Subscription not found"}, False),
        ("test/1", {"message": "Subscription not found", "receipt-id": "r1"}, False),
        ("", {"message": "Subscription not found"}, False),
    ],
    ids=["rabbitmq-subscription-not-found", "rabbitmq-other", "rabbitmq-receipt-is-not-enough",
         "activemq-with-receipt", "activemq-without-receipt", "activemq-rabbitmq-message", "other-broker",
         "no-server-header"],
)
def test_which_errors_keep_the_session(server, headers, kept):
    p = _connected_to(server)
    after = encode_frame("MESSAGE", {"subscription": "1", "message-id": "8", "destination": "/q"}, b"after")
    events = p.receive_data(encode_frame("ERROR", headers, b"details") + after)
    assert type(events[0]) is ErrorReceived and type(events[0].error) is ServerError
    assert events[0].ends_session is not kept
    if kept:
        # the session goes on: the frame after the ERROR is delivered, calls are accepted
        assert p.state is SessionState.CONNECTED
        assert [type(e) for e in events] == [ErrorReceived, Message] and events[1].body == b"after"
        assert p.send("/q", b"x")[0].startswith(b"SEND\n")
        assert "ends_session=False" in repr(events[0])
        # a kept ERROR ends nothing, so nothing is read on for later ones
        assert p.ending_error is None and not p.reading_errors
    else:
        assert p.state is SessionState.FAILED and len(events) == 1
        with pytest.raises(ServerError):
            p.send("/q", b"x")


def test_an_error_while_disconnecting_may_keep_the_session_until_the_receipt():
    p = _connected_to("RabbitMQ/3.10.8")
    _, rid = p.disconnect()
    events = p.receive_data(
        encode_frame("ERROR", {"message": "Subscription not found"}) + encode_frame("RECEIPT", {"receipt-id": rid})
    )
    assert [type(e) for e in events] == [ErrorReceived, ReceiptReceived]
    assert p.state is SessionState.CLOSED


def test_an_error_answering_connect_always_ends_the_session():
    p = StompProtocol()
    p.connect()
    (event,) = p.receive_data(encode_frame("ERROR", {"message": "Subscription not found", "receipt-id": "r"}))
    assert type(event.error) is AuthenticationError and event.ends_session
    assert p.state is SessionState.FAILED


# -- what each broker is sent: prefetch and routing headers ----------------------------------


@pytest.mark.parametrize(
    "server, broker, prefetch",
    [
        ("RabbitMQ/3.10.8", "rabbitmq", {"prefetch-count": "7"}),
        ("ActiveMQ/5.17.2", "activemq", {"activemq.prefetchSize": "7"}),
        ("ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine", "artemis", {"consumer-window-size": "7168"}),
        ("something/1", None, {"prefetch-count": "7"}),
    ],
)
def test_each_broker_gets_the_prefetch_header_it_reads(server, broker, prefetch):
    p = _connected_to(server)
    assert p.broker == broker
    data, _, _ = p.subscribe("/queue/a", ack="client-individual", prefetch=7)
    headers = parse(data).headers
    assert {k: v for k, v in headers.items() if k in PREFETCH_HEADERS} == prefetch
    # a prefetch header of the caller's own: none added
    data, _, _ = p.subscribe("/queue/b", ack="client", prefetch=7, headers={"consumer-window-size": "-1"})
    assert {k: v for k, v in parse(data).headers.items() if k in PREFETCH_HEADERS} == {"consumer-window-size": "-1"}


@pytest.mark.parametrize("routing_headers", [True, False])
@pytest.mark.parametrize("server", ["ActiveMQ-Artemis/2.40.0", "RabbitMQ/3.10.8", "ActiveMQ/5.17.2"])
def test_routing_headers_go_to_artemis_only(server, routing_headers):
    p = StompProtocol(heart_beat=(0, 0), routing_headers=routing_headers)
    p.connect()
    p.receive_data(encode_frame("CONNECTED", {"version": "1.2", "server": server}))
    on = routing_headers and server.startswith("ActiveMQ-Artemis/")
    frames = {
        "queue": parse(p.send("/queue/q", b"x")[0]),
        "queue-receipt": parse(p.send("/queue/q", b"x", receipt=True)[0]),
        "plain": parse(p.send_plain("/queue/q", b"x")),
        "topic-headers": parse(p.send("/topic/t", b"x", headers={"x": "1"})[0]),
        "encode_send": parse(p.encode_send("/queue/q", b"x", None, None, "r99")),
        "other": parse(p.send("/exchange/e", b"x")[0]),
        "sub-queue": parse(p.subscribe("/queue/q")[0]),
        "sub-topic": parse(p.subscribe("/topic/t")[0]),
    }
    kinds = {k: f.headers.get("destination-type", f.headers.get("subscription-type")) for k, f in frames.items()}
    expected = {k: None for k in frames}
    if on:
        expected.update({"queue": "ANYCAST", "queue-receipt": "ANYCAST", "plain": "ANYCAST",
                         "topic-headers": "MULTICAST", "encode_send": "ANYCAST", "sub-queue": "ANYCAST",
                         "sub-topic": "MULTICAST"})
    assert kinds == expected
    # the caller's own header wins
    data, _ = p.send("/queue/q", b"x", headers={"destination-type": "MULTICAST"})
    assert parse(data).header_list.count(("destination-type", "MULTICAST")) == 1
    assert "ANYCAST" not in parse(data).headers.values()


def test_a_transactional_ack_is_refused_on_artemis_only():
    for server, refused in (("ActiveMQ-Artemis/2.40.0", True), ("ActiveMQ/5.17.2", False)):
        p = _connected_to(server)
        p.subscribe("/queue/a", ack="client-individual")
        (message,) = p.receive_data(
            encode_frame("MESSAGE", {"subscription": "2", "message-id": "m1", "ack": "m1", "destination": "/q"})
        )
        _, tx, _ = p.begin()
        if refused:
            with pytest.raises(LocalProtocolError, match="Artemis"):
                p.check_transactional_settle("ACK")
            with pytest.raises(LocalProtocolError, match="Artemis"):
                p.ack(message, transaction=tx)
        else:
            p.check_transactional_settle("ACK")
            assert p.ack(message, transaction=tx)


# -- durable subscriptions: what each broker is sent -------------------------------------------

ARTEMIS_SERVER = "ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine"
_DURABLE_NAMES = ("durable", "auto-delete", "activemq.subscriptionName", "durable-subscription-name")


def _durable_session(server: str, **kwargs) -> StompProtocol:
    p = StompProtocol(heart_beat=(0, 0), **kwargs)
    p.connect()
    p.receive_data(encode_frame("CONNECTED", {"version": "1.2", "server": server}))
    return p


def _frames(data: bytes):
    return FrameScanner(version="1.2").feed(data)


@pytest.mark.parametrize(
    "server, subscribe, forget",
    [
        ("RabbitMQ/3.10.8", {"durable": "true", "auto-delete": "false"}, [{"durable": "true"}]),
        ("ActiveMQ/5.17.2", {"activemq.subscriptionName": "prices-reader"},
         [{}, {"activemq.subscriptionName": "prices-reader"}]),
        (ARTEMIS_SERVER, {"durable-subscription-name": "prices-reader"},
         [{"durable-subscription-name": "prices-reader"}]),
        ("something/1", {"durable": "true", "auto-delete": "false", "activemq.subscriptionName": "prices-reader",
                         "durable-subscription-name": "prices-reader"},
         [{"durable": "true", "activemq.subscriptionName": "prices-reader",
           "durable-subscription-name": "prices-reader"}]),
    ],
    ids=["rabbitmq", "activemq", "artemis", "unknown"],
)
def test_each_broker_gets_the_durable_headers_it_reads(server, subscribe, forget):
    p = _durable_session(server, client_id="app-1")
    data, sub_id, _ = p.subscribe("/topic/prices", ack="client-individual", durable="prices-reader")
    headers = parse(data).headers
    # the id is the name (RabbitMQ names the durable queue after it)
    assert sub_id == headers["id"] == "prices-reader"
    assert {k: v for k, v in headers.items() if k in _DURABLE_NAMES} == subscribe
    # a plain UNSUBSCRIBE keeps the durable subscription on the broker: no durable header
    data, _ = p.unsubscribe(sub_id)
    assert [f.headers for f in _frames(data)] == [{"id": "prices-reader"}]
    # forget: the headers that delete it (ActiveMQ: a plain UNSUBSCRIBE first, as it
    # refuses to delete a subscription whose consumer is still there), the receipt on the last
    p.subscribe("/topic/prices", durable="prices-reader")
    data, rid = p.unsubscribe("prices-reader", forget=True, receipt=True)
    frames = _frames(data)
    assert [f.command for f in frames] == ["UNSUBSCRIBE"] * len(forget)
    assert [{k: v for k, v in f.headers.items() if k != "receipt"} for f in frames] == [
        {"id": "prices-reader", **h} for h in forget
    ]
    assert frames[-1].headers["receipt"] == rid and all("receipt" not in f.headers for f in frames[:-1])


def test_durable_headers_of_the_caller_win_and_routing_still_applies():
    p = _durable_session(ARTEMIS_SERVER, client_id="app-1")
    data, _, _ = p.subscribe("/topic/t", durable="n", headers={"durable-subscription-name": "mine"})
    frame = parse(data)
    assert frame.header_list.count(("durable-subscription-name", "mine")) == 1
    assert "n" not in [v for k, v in frame.header_list if k == "durable-subscription-name"]
    assert frame.headers["subscription-type"] == "MULTICAST"


@pytest.mark.parametrize("server", ["ActiveMQ/5.17.2", ARTEMIS_SERVER])
def test_a_durable_subscription_without_client_id_is_refused_where_the_broker_needs_one(server):
    p = _durable_session(server)
    with pytest.raises(ConfigurationError, match="client_id"):
        p.subscribe("/topic/t", durable="n")
    with pytest.raises(ConfigurationError, match="client_id"):
        p.check_durable("n")
    # nothing was recorded: the name is free for a later subscribe
    assert p.ack_mode("n") is None
    # a client-id given in connect_headers counts too
    p = _durable_session(server, connect_headers={"client-id": "app-1"})
    assert parse(p.subscribe("/topic/t", durable="n")[0]).headers["id"] == "n"


def test_rabbitmq_needs_no_client_id_for_a_durable_subscription():
    p = _durable_session("RabbitMQ/3.10.8")
    assert parse(p.subscribe("/topic/t", durable="n")[0]).headers["durable"] == "true"


def test_client_id_is_the_connect_header():
    p = StompProtocol(client_id="app-1")
    assert parse(p.connect()).headers["client-id"] == "app-1"
    assert StompProtocol(client_id="a", connect_headers={"client-id": "a"}).client_id == "a"
    with pytest.raises(ConfigurationError, match="differ"):
        StompProtocol(client_id="a", connect_headers={"client-id": "b"})
    for bad in ("", 5):
        with pytest.raises(ConfigurationError, match="client_id"):
            StompProtocol(client_id=bad)


def test_durable_name_and_id_are_checked_and_forget_needs_a_durable_subscription():
    p = _durable_session("RabbitMQ/3.10.8")
    for bad in ("", 3):
        with pytest.raises(ConfigurationError, match="durable"):
            p.subscribe("/topic/t", durable=bad)
    with pytest.raises(ConfigurationError, match="id"):
        p.subscribe("/topic/t", durable="n", id="other")
    # the same id as the name is accepted
    assert p.subscribe("/topic/t", durable="n", id="n")[1] == "n"
    with pytest.raises(LocalProtocolError, match="already in use"):
        p.subscribe("/topic/u", durable="n")
    _, plain, _ = p.subscribe("/topic/t")
    with pytest.raises(LocalProtocolError, match="not durable"):
        p.unsubscribe(plain, forget=True)


# -- message options: ttl, priority, persistent; selectors ----------------------------------------

SERVERS = {"rabbitmq": "RabbitMQ/3.10.8", "activemq": "ActiveMQ/5.17.2", "artemis": "ActiveMQ-Artemis/2.40.0",
           "unknown": "stompfast-testing/1"}


def _session(server: str, **kwargs) -> StompProtocol:
    p = StompProtocol(heart_beat=(0, 0), **kwargs)
    p.connect()
    p.receive_data(encode_frame("CONNECTED", {"version": "1.2", "server": server, "heart-beat": "0,0"}))
    return p


@pytest.mark.parametrize(
    "broker, expected",
    [
        # RabbitMQ reads a relative expiration in ms; ActiveMQ and Artemis the absolute epoch ms
        ("rabbitmq", {"expiration": "1500"}),
        ("activemq", {"expires": "1000001500"}),
        ("artemis", {"expires": "1000001500"}),
        # a broker not known (Artemis on 1.0): both
        ("unknown", {"expiration": "1500", "expires": "1000001500"}),
    ],
)
def test_ttl_is_written_as_the_broker_reads_it(broker, expected):
    p = _session(SERVERS[broker])
    h = p.message_headers({"x": "1"}, 1.5, None, None, 1_000_000.0)
    assert h == {"x": "1", **expected}
    data, _ = p.send("/topic/t", b"body", h)
    assert {k: v for k, v in parse(data).headers.items() if k in ("expiration", "expires")} == expected


def test_a_ttl_under_a_millisecond_still_expires():
    # rounded up: "expiration:0" would mean "now or never" on RabbitMQ
    assert _session(SERVERS["rabbitmq"]).message_headers(None, 0.0001, None, None, 0.0) == {"expiration": "1"}


@pytest.mark.parametrize("broker", sorted(SERVERS))
def test_priority_and_persistent_are_the_same_header_everywhere(broker):
    p = _session(SERVERS[broker])
    assert p.message_headers(None, None, 9, True, 0.0) == {"priority": "9", "persistent": "true"}
    assert p.message_headers(None, None, 0, False, 0.0) == {"priority": "0", "persistent": "false"}


@pytest.mark.parametrize(
    "options, match",
    [
        ({"ttl": 0}, "ttl must be"),
        ({"ttl": -1.0}, "ttl must be"),
        ({"ttl": float("inf")}, "ttl must be"),
        ({"ttl": float("nan")}, "ttl must be"),
        ({"ttl": "5"}, "ttl must be"),
        ({"ttl": True}, "ttl must be"),
        ({"ttl": 315_360_001}, "ttl must be"),
        ({"priority": 10}, "priority must be"),
        ({"priority": -1}, "priority must be"),
        ({"priority": 4.0}, "priority must be"),
        ({"priority": "4"}, "priority must be"),
        ({"priority": True}, "priority must be"),
        ({"persistent": "true"}, "persistent must be"),
        ({"persistent": 1}, "persistent must be"),
    ],
)
def test_bad_message_options_are_refused(options, match):
    p = _session(SERVERS["rabbitmq"])
    args = {"ttl": None, "priority": None, "persistent": None, **options}
    with pytest.raises(ConfigurationError, match=match):
        p.message_headers(None, args["ttl"], args["priority"], args["persistent"], 0.0)


@pytest.mark.parametrize(
    "option, header",
    [("ttl", "expiration"), ("ttl", "expires"), ("priority", "priority"), ("persistent", "persistent")],
)
def test_an_option_and_its_header_together_are_refused(option, header):
    p = _session(SERVERS["artemis"])
    args = {"ttl": None, "priority": None, "persistent": None, option: {"ttl": 1.0, "priority": 1,
                                                                         "persistent": True}[option]}
    with pytest.raises(ConfigurationError, match="give one"):
        p.message_headers({header: "1"}, args["ttl"], args["priority"], args["persistent"], 0.0)
    # the caller's headers are not changed either way
    headers = {header: "1"}
    with pytest.raises(ConfigurationError):
        p.message_headers(headers, args["ttl"], args["priority"], args["persistent"], 0.0)
    assert headers == {header: "1"}


@pytest.mark.parametrize("broker", sorted(SERVERS))
def test_queue_sends_are_persistent_by_default_on_every_broker_it_knows(broker):
    p = _session(SERVERS[broker])
    on = broker != "unknown"
    frames = {
        "send": parse(p.send("/queue/q", b"x")[0]),
        "send-receipt": parse(p.send("/queue/q", b"x", receipt=True)[0]),
        "send-ct": parse(p.send("/queue/q", b"x", content_type="text/plain")[0]),
        "plain": parse(p.send_plain("/queue/q", b"x")),
        "headers": parse(p.send("/queue/q", b"x", headers={"x": "1"})[0]),
        "no-length": parse(p.send("/queue/q", b"x", content_length=False)[0]),
        "encode_send": parse(p.encode_send("/queue/q", b"x", None, None, "t1")),
    }
    assert {k: f.headers.get("persistent") for k, f in frames.items()} == {k: "true" if on else None for k in frames}
    # a topic, or a destination of another kind: not by default
    assert "persistent" not in parse(p.send("/topic/t", b"x")[0]).headers
    assert "persistent" not in parse(p.send_plain("/exchange/e/k", b"x")).headers
    # the message says otherwise: it wins, once
    data, _ = p.send("/queue/q", b"x", headers={"persistent": "false"})
    assert parse(data).header_list.count(("persistent", "false")) == 1
    assert "true" not in [v for k, v in parse(data).header_list if k == "persistent"]


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("broker", sorted(SERVERS))
def test_the_client_option_persistent_decides_for_every_send(broker, persistent):
    p = _session(SERVERS[broker], persistent=persistent)
    for data in (p.send("/queue/q", b"x")[0], p.send_plain("/topic/t", b"x"), p.send("/exchange/e", b"")[0]):
        assert parse(data).headers.get("persistent") == ("true" if persistent else None)


def test_the_persistent_option_is_checked():
    with pytest.raises(ConfigurationError, match="persistent must be"):
        StompProtocol(persistent="yes")


def test_a_selector_is_refused_on_rabbitmq_and_nothing_is_recorded():
    p = _session(SERVERS["rabbitmq"])
    with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
        p.subscribe("/queue/q", headers={"selector": "a = 1"}, id="s")
    # nothing recorded: the id is free, and a subscription without a selector goes through
    data, sub_id, _ = p.subscribe("/queue/q", id="s")
    assert sub_id == "s" and "selector" not in parse(data).headers


@pytest.mark.parametrize("broker", ["activemq", "artemis", "unknown"])
def test_a_selector_is_passed_on_elsewhere(broker):
    data, _, _ = _session(SERVERS[broker]).subscribe("/queue/q", headers={"selector": "region = 'EU'"})
    assert parse(data).headers["selector"] == "region = 'EU'"


def test_a_skipped_message_is_made_an_oversized_message_and_its_neighbours_stay_messages():
    # The scanner skips a MESSAGE over max_frame_bytes that has a content-length; the session
    # builds its event as an OversizedMessage (its class from the start) and every other
    # MESSAGE of that feed and of later feeds as a Message.
    p = connected(max_frame_bytes=512, skip_oversized=True)
    p.subscribe("/queue/a", ack="client-individual")

    def frame(mid: str, size: int) -> bytes:
        headers = {"destination": "/queue/a", "message-id": mid, "subscription": "1", "ack": mid}
        return encode_frame("MESSAGE", headers, b"x" * size)

    events = p.receive_data(frame("m-1", 10) + frame("m-2", 4096) + frame("m-3", 10))
    assert [type(e) for e in events] == [Message, OversizedMessage, Message]
    big = events[1]
    assert big.oversized and big.size == 4096 and big.ack_id == "m-2" and big.session is p
    with pytest.raises(MessageTooLargeError):
        _ = big.body
    (later,) = p.receive_data(frame("m-4", 10))
    assert type(later) is Message and later.body == b"x" * 10
    assert p.ack_plain(big) == b"ACK\nid:m-2\n\n\0"
