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


# ---------------------------------------------------------------------------------------
# The other languages' clients (bench/polyglot): go-stomp and stompjs
# ---------------------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import polyglot  # noqa: E402

TOOLS = {"go-stomp": "go", "stompjs": "node"}


@pytest.fixture(scope="module")
def built() -> dict:
    """Each program built once for the module (bench/.build keeps it across runs): a test skips only
    when the tool is absent; a build that fails with the tool present fails the test."""
    out = {}
    for name, need in TOOLS.items():
        if polyglot.tool(need) is None:
            out[name] = None
            continue
        cmd, why = polyglot.ensure(name)
        assert cmd is not None, "%s: %s" % (name, why)
        out[name] = cmd
    return out


def run_compare(tmp_path: Path, argv: list, env: dict = None, timeout: float = 120) -> tuple:
    out_json = tmp_path / ("run%d.json" % len(list(tmp_path.glob("run*.json"))))
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--quick", "--settle", "0", "--no-progress",
         "--json", str(out_json)] + argv,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=env)
    text = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, text
    return json.loads(out_json.read_text()), text


def assert_measured(data: dict, broker: str, label: str, scenarios: list, text: str) -> None:
    assert not data["failures"], text
    rows = {r["scenario"]: r for r in data["rows"] if r["broker"] == broker and r["contender"] == label}
    assert sorted(rows) == sorted(scenarios), text
    for s, r in rows.items():
        assert "na" not in r, "%s, %s, scenario %d: %s\n%s" % (broker, label, s, r["na"], text)
        assert r["reps"] == 1 and r["failed"] == 0, text
        assert r["msgs_per_s_best"] > 0 and r["cpu_us_best"] > 0 and 0 < r["client_cpu_share"] < 8, r
    ms = [m for m in data["measurements"] if m["broker"] == broker and m["contender"] == label]
    for m in ms:
        assert m["ok"] and m["wall"] > 0, m
        if m["scenario"] in (3, 4, 5):  # the parent's check of the program's received bodies
            assert m["bodies_ok"] and m["received"] == m["distinct"] == m["n"], m
        if m["scenario"] == 5:
            assert m["latency_us"]["samples"] == m["n"] and m["latency_us"]["p50"] > 0, m


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_polyglot_contender_on_the_null_sink(name: str, built: dict, tmp_path: Path) -> None:
    if built[name] is None:
        pytest.skip("%s not installed" % TOOLS[name])
    data, text = run_compare(tmp_path, ["--brokers", "null", "--contenders", name, "--scenarios", "1,2,3,4",
                                        "--n", "1000", "--receipts", "100", "--preflight-n", "100"])
    assert_measured(data, "null", compare.LABELS[name], [1, 2, 3, 4], text)
    assert name in data["environment"] and ("n/a: " not in text), text


def test_polyglot_contenders_on_rabbitmq(built: dict, tmp_path: Path) -> None:
    url = os.environ.get("STOMPFAST_RABBITMQ_URL")
    if not url:
        pytest.skip("STOMPFAST_RABBITMQ_URL is not set (scripts/brokers.sh env)")
    names = [n for n in sorted(TOOLS) if built[n] is not None]
    if not names:
        pytest.skip("neither go nor node is installed")
    port = urlsplit(url).port or 61613
    data, text = run_compare(tmp_path, ["--brokers", "rabbitmq", "--rabbitmq-port", str(port), "--contenders",
                                        ",".join(names), "--scenarios", "1,2,3,4,5", "--n", "500", "--receipts",
                                        "50", "--duration", "0.2", "--preflight-n", "50"])
    for name in names:
        assert_measured(data, "rabbitmq", compare.LABELS[name], [1, 2, 3, 4, 5], text)


@pytest.mark.parametrize("setting", ["", "/bin/false"])
def test_polyglot_without_its_tool_is_na(setting: str, tmp_path: Path) -> None:
    # go missing ("") or a build that fails (a "go" that exits 1): n/a with the reason, and the run goes on
    env = dict(os.environ, STOMPFAST_BENCH_GO=setting, STOMPFAST_BENCH_BUILD=str(tmp_path / "build"))
    data, text = run_compare(tmp_path, ["--brokers", "null", "--contenders", "go-stomp,raw", "--scenarios", "1"],
                             env=env)
    row = next(r for r in data["rows"] if r["contender"] == "go-stomp")
    want = "go not found" if not setting else "go build failed (exit 1)"
    assert want in row["na"] and "go-stomp" in text and "n/a: " + want in text, text
    assert next(r for r in data["rows"] if r["contender"] == "raw socket")["msgs_per_s_best"] > 0


def test_polyglot_programs_get_the_brokers_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake_run(name: str, spec: dict, timeout: float, broker_pid: object) -> dict:
        seen[name] = spec
        window = {"wall": 1.0, "cpu_user": 0.1, "cpu_sys": 0.0, "nvcsw": 0, "nivcsw": 0, "broker_cpu": None,
                  "machine_busy": None}
        return {"window": window, "received": spec["n"], "distinct": spec["n"],
                "bodies_sha256": polyglot.expected_sha256(spec["tag"].encode(), spec["n"]), "lat_ns": [1000, 3000]}

    monkeypatch.setattr(polyglot, "run", fake_run)
    base = {"host": "h", "port": 1, "login": "l", "passcode": "p", "dest": "/queue/q", "n": 3, "tag": "t",
            "timeout": 9.0, "rate": 10.0}
    win = cc.Window(None)
    out = compare.worker_gostomp(dict(base, scenario=4, broker="artemis"), win)
    assert seen["go-stomp"]["send_headers"] == list(cc.send_headers("artemis").items())
    assert seen["go-stomp"]["subscribe_headers"] == list(cc.subscribe_headers("artemis", True).items())
    assert out["bodies_ok"] and win.result["wall"] == 1.0 and out["latency_us"]["p50"] == 1.0
    out = compare.worker_stompjs(dict(base, scenario=3, broker="rabbitmq"), win)
    assert seen["stompjs"]["send_headers"] == [] and seen["stompjs"]["subscribe_headers"] == []
    assert out["bodies_ok"]

    def wrong(name: str, spec: dict, timeout: float, broker_pid: object) -> dict:
        data = fake_run(name, spec, timeout, broker_pid)
        data["bodies_sha256"] = "0" * 64  # same count, other bodies
        return data

    monkeypatch.setattr(polyglot, "run", wrong)
    assert not compare.worker_gostomp(dict(base, scenario=3, broker="null"), win)["bodies_ok"]


def test_polyglot_targets() -> None:
    # the targets: asyncio/uvloop >= go-stomp and stompjs throughput in 1, 3, 4 and CPU <= 1.5x
    # go-stomp's there; scenario 2 within 10% of the faster; sync >= 0.8x go-stomp's throughput
    def r(s: int, name: str, rate: float, cpu: float) -> dict:
        return {"broker": "rabbitmq", "scenario": s, "contender": compare.LABELS[name], "msgs_per_s_best": rate,
                "cpu_us_best": cpu}

    rows = [r(1, "asyncio", 100, 3.0), r(1, "go-stomp", 90, 2.5), r(1, "stompjs", 110, 9.0),
            r(2, "asyncio", 91, 50), r(2, "go-stomp", 100, 40), r(2, "stompjs", 60, 90),
            r(3, "asyncio", 100, 4.0), r(3, "go-stomp", 100, 2.0), r(3, "stompjs", 50, 9.0),
            r(1, "sync", 71, 5), r(2, "sync", 81, 60)]
    verdicts = {t["target"]: t["verdict"] for t in compare.evaluate_targets(rows, ["asyncio", "sync", "go-stomp",
                                                                                   "stompjs"])
                if "go-stomp" in t["target"] or "stompjs" in t["target"]}
    a, g, j = compare.LABELS["asyncio"], compare.LABELS["go-stomp"], compare.LABELS["stompjs"]
    assert verdicts == {
        "%s msgs/s vs %s, 1 publish" % (a, g): "PASS", "%s msgs/s vs %s, 1 publish" % (a, j): "FAIL",
        "%s CPU us/msg vs go-stomp, 1 publish" % a: "PASS",
        "%s msgs/s vs %s, 3 drain auto" % (a, g): "PASS", "%s msgs/s vs %s, 3 drain auto" % (a, j): "PASS",
        "%s CPU us/msg vs go-stomp, 3 drain auto" % a: "FAIL",
        "%s msgs/s vs the faster of %s/%s, 2 send+receipt" % (a, g, j): "PASS",
        "stompfast/sync msgs/s vs go-stomp, 1 publish": "FAIL",
        "stompfast/sync msgs/s vs go-stomp, 2 send+receipt": "PASS",
    }


def test_the_loop_thread_floor_drains_the_null_sink(tmp_path: Path) -> None:
    # issue 26: the floor of the blocking client's drains (reads in an asyncio loop thread,
    # taking and acking in the caller's thread, nothing of STOMP but bytes.find) gives real
    # numbers in scenarios 3 and 4, with every body checked, and stays n/a where it is no floor
    data, text = run_compare(tmp_path, ["--brokers", "null", "--contenders", "floor-sync", "--scenarios", "1,2,3,4",
                                        "--n", "1000", "--receipts", "100", "--preflight-n", "100"])
    label = compare.LABELS["floor-sync"]
    measured = [r for r in data["rows"] if r["contender"] == label and "na" not in r]
    assert sorted(r["scenario"] for r in measured) == [2, 3, 4], text
    assert_measured({"failures": data["failures"], "rows": measured, "measurements": data["measurements"]},
                    "null", label, [2, 3, 4], text)


def test_the_asyncio_floor_is_measured_in_scenario_2_only(tmp_path: Path) -> None:
    # the least any stock-asyncio client does per receipt round trip, in the same run as the
    # clients (issue 26: what of scenario 2's gap to go-stomp is the event loop's own)
    data, text = run_compare(tmp_path, ["--brokers", "null", "--contenders", "floor-asyncio", "--scenarios", "1,2,3",
                                        "--receipts", "100", "--n", "1000", "--preflight-n", "100"])
    label = compare.LABELS["floor-asyncio"]
    measured = [r for r in data["rows"] if r["contender"] == label and "na" not in r]
    assert [r["scenario"] for r in measured] == [2], text
    assert_measured({"failures": data["failures"], "rows": measured, "measurements": data["measurements"]},
                    "null", label, [2], text)


def run_sync_receipts(env: dict) -> str:
    proc = subprocess.run([sys.executable, str(BENCH / "sync_receipts.py"), "--n", "60", "--rounds", "1"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def measured_rows(text: str) -> dict:
    """``label -> CPU µs per round trip`` of bench/sync_receipts.py's table."""
    rows = {}
    for line in text.splitlines():
        for label in ("stomp.py/", "stompfast/", "floor: hop/", "floor: direct/"):
            if line.startswith(label):
                name = line[:28].strip()
                rows[name] = float(line[28:].split()[0])
    return rows


def test_sync_receipts_on_the_in_process_broker() -> None:
    # Plain TCP only (no TLS or WebSocket URL): every loop's client and both floors, and stomp.py
    from stompfast.testing import Broker

    with Broker.in_thread(heart_beat=(0, 0)) as broker:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_RABBITMQ")}
        env["STOMPFAST_RABBITMQ_URL"] = broker.url.replace("stomp://", "stomp://guest:guest@")
        text = run_sync_receipts(env)
    assert "not measured" in text and "failed" not in text, text
    rows = measured_rows(text)
    expected = {"stomp.py/tcp"} | {"%s/%s/tcp" % (kind, loop) for loop in ("asyncio", "uvloop", "trio")
                                   for kind in ("stompfast", "floor: hop", "floor: direct")}
    assert set(rows) == expected, text
    assert all(cpu > 0 for cpu in rows.values()), text


def test_sync_receipts_on_rabbitmq_over_tcp_tls_and_websocket() -> None:
    if not all(os.environ.get(k) for k in ("STOMPFAST_RABBITMQ_URL", "STOMPFAST_RABBITMQ_TLS_URL",
                                           "STOMPFAST_RABBITMQ_WS_URL", "STOMPFAST_TLS_CA")):
        pytest.skip("RabbitMQ's URLs are not set (scripts/brokers.sh env)")
    text = run_sync_receipts(dict(os.environ))
    assert "failed" not in text and "not measured" not in text, text
    rows = measured_rows(text)
    for transport in ("tcp", "tls", "ws"):
        for loop in ("asyncio", "uvloop", "trio"):
            assert "stompfast/%s/%s" % (loop, transport) in rows, text
            assert "floor: hop/%s/%s" % (loop, transport) in rows, text
    assert {"stomp.py/tcp", "stomp.py/tls"} <= set(rows), text
