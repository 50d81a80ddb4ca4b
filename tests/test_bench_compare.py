"""bench/compare.py and bench/client_compare.py: broker options and the headers every contender sends.

No broker needed: the frames the raw socket and the parent's fill/check write, the headers
stomp.py and stompman are given, the port options, and a whole ``compare.py`` run against a
port nothing listens on (the broker is reported NOT READY, the run still ends cleanly).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

pytest.importorskip("stomp", reason="the benchmark scripts import stomp.py (pip install -e '.[bench]')")
sys.path.insert(0, str(BENCH))

import client_compare as cc  # noqa: E402
import compare  # noqa: E402

from stompfast._brokers import ARTEMIS_WINDOW_BYTES_PER_MESSAGE, prefetch_headers, routing_type  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_artemis_is_a_broker_of_both_scripts() -> None:
    assert cc.BROKERS["artemis"] == ("127.0.0.1", 61618)
    assert "artemis" in compare.ALL_BROKERS
    args = compare.parse_args(["--brokers", "artemis", "--quick"])
    assert args.broker_list == ["artemis"] and args.artemis_port is None
    args = cc.parse_args(["--broker", "artemis", "--quick"])
    assert args.broker == ["artemis"]


@pytest.mark.parametrize("name", ["rabbitmq", "activemq", "artemis"])
def test_port_options(name: str) -> None:
    port = free_port()
    for module, argv in ((compare, ["--brokers", name]), (cc, ["--broker", name])):
        args = module.parse_args(argv + ["--%s-port" % name, str(port)])
        run = cc.BrokerRun(name, args, "t", [])
        assert run.port == port and run.access.port == port and run.access.broker == name
        run = cc.BrokerRun(name, module.parse_args(argv), "t", [])
        assert run.port == cc.BROKERS[name][1]


def test_artemis_headers_match_what_stompfast_writes() -> None:
    # the window our client asks for on Artemis (buffer_size=PREFETCH), and its routing
    assert cc.ARTEMIS_WINDOW_BYTES_PER_MESSAGE == ARTEMIS_WINDOW_BYTES_PER_MESSAGE
    assert cc.subscribe_headers("artemis", True) == {
        **prefetch_headers("artemis", cc.PREFETCH), "subscription-type": routing_type("/queue/x")}
    assert cc.subscribe_headers("artemis", False) == {"subscription-type": "ANYCAST"}
    assert cc.send_headers("artemis") == {"destination-type": routing_type("/queue/x")}
    # elsewhere nothing changes
    for broker in ("rabbitmq", "activemq", "null", None):
        assert cc.send_headers(broker) == {}
        assert cc.subscribe_headers(broker, False) == {}
        assert cc.subscribe_headers(broker, True) == {"prefetch-count": "1000", "activemq.prefetchSize": "1000"}


def test_raw_frames() -> None:
    q = b"/queue/q"
    assert cc.raw_send_head(q, b"r1", "artemis") == (
        b"SEND\ndestination:/queue/q\ndestination-type:ANYCAST\nreceipt:r1\ncontent-length:100\n\n")
    # byte for byte what the raw socket wrote before Artemis was added
    assert cc.raw_send_head(q, None, "rabbitmq") == cc.raw_send_head(q) == (
        b"SEND\ndestination:/queue/q\ncontent-length:100\n\n")
    assert cc.raw_subscribe_frame(q, False) == b"SUBSCRIBE\ndestination:/queue/q\nid:1\nack:auto\n\n\x00"
    assert cc.raw_subscribe_frame(q, True, "activemq") == (
        b"SUBSCRIBE\ndestination:/queue/q\nid:1\nack:client-individual\nprefetch-count:1000\n"
        b"activemq.prefetchSize:1000\n\n\x00")
    frame = cc.raw_subscribe_frame(q, True, "artemis", receipt=b"s")
    assert frame == (b"SUBSCRIBE\ndestination:/queue/q\nid:1\nack:client-individual\nsubscription-type:ANYCAST\n"
                     b"consumer-window-size:1024000\nreceipt:s\n\n\x00")
    assert b"activemq.prefetchSize" not in frame  # Artemis would read it as a window of 1000 bytes
    batches = cc.raw_publish_batches(q, cc.make_bodies(b"t", 3), b"last", "artemis")
    frames = b"".join(batches).split(b"\x00")[:-1]
    assert len(frames) == 3 and all(b"\ndestination-type:ANYCAST\n" in f for f in frames)
    assert b"receipt:last\n" in frames[-1]


def test_compare_on_a_port_without_a_broker() -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--brokers", "artemis", "--artemis-port", str(port), "--quick",
         "--contenders", "asyncio,stomppy,raw", "--scenarios", "1", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "brokers: artemis;" in out
    assert "artemis: NOT READY" in out and "note: artemis not measured" in out


def test_the_compat_contender_and_its_targets() -> None:
    # issue 25: the compat layer runs stomp.py's own worker after install(), and is judged at
    # >= 2x stomp.py's msgs per client-CPU-second on publish and drains, >= 1x on receipts
    assert compare.CONTENDERS["compat"] == ("compat", "")
    assert compare.WORKERS["compat"] is compare.worker_compat
    label = compare.LABELS["compat"]
    values = {1: 2.4, 2: 0.9, 3: 2.0, 4: 1.9}
    rows = [{"broker": "rabbitmq", "scenario": s, "contender": label, "vs_stomppy": v} for s, v in values.items()]
    rows.append({"broker": "null", "scenario": 1, "contender": label, "vs_stomppy": 9.0})
    verdicts = {t["target"].rsplit(", ", 1)[1].split(" ", 1)[0]: t["verdict"]
                for t in compare.evaluate_targets(rows, ["compat"]) if label in t["target"]}
    assert verdicts == {"1": "PASS", "2": "FAIL", "3": "PASS", "4": "FAIL"}
