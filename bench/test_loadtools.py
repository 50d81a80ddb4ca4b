# ruff: noqa: E501
"""Tests of bench/loadtools.py's parsing functions on output captured from real runs.

Every canned text below is what the tool printed on this machine (November 2026): PerfTest 2.22.1
against RabbitMQ 3.10.8 (``-x 1 -y 1 -s 100 -a``, max rate for 5 s and ``-r 1000`` for 4 s),
``artemis perf client`` 2.40.0 against a throwaway Artemis 2.40.0 (``--max-pending 100``, max rate
for 4 s, ``--rate 1000`` for 5 s), and ``stompfast bench --json --rate 1000`` (abridged to the keys
loadtools reads: the timeline and client_stats are left out, every value is as printed).
Run: ``python -m pytest bench/test_loadtools.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadtools as lt  # noqa: E402

PERFTEST_VERSION_BANNER = "\n".join([
    "\u001b[1mRabbitMQ Perf Test 2.22.1 (b9d98f48f7a79b7bed6c4e3117ebff742e37d272; 2024-11-19T14:49:09Z)",
    "\u001b[0mRabbitMQ AMQP Client version: 5.23.0",
    "Java version: 17.0.15, vendor: Debian",
])

PERFTEST_MAX = "\n".join([
    "id: test-152842-853, starting consumer #0",
    "id: test-152842-853, starting consumer #0, channel #0",
    "id: test-152842-853, starting producer #0",
    "id: test-152842-853, starting producer #0, channel #0",
    "id: test-152842-853, time 1.001 s, sent: 15534 msg/s, received: 13362 msg/s, min/median/75th/95th/99th consumer latency: 854/48573/105990/185274/207030 µs",
    "id: test-152842-853, time 2.000 s, sent: 18544 msg/s, received: 18705 msg/s, min/median/75th/95th/99th consumer latency: 8989/137351/210612/251500/266558 µs",
    "id: test-152842-853, time 3.000 s, sent: 13770 msg/s, received: 15778 msg/s, min/median/75th/95th/99th consumer latency: 183/124989/238779/274768/287586 µs",
    "id: test-152842-853, time 4.000 s, sent: 19058 msg/s, received: 17089 msg/s, min/median/75th/95th/99th consumer latency: 1280/92464/130316/204926/212892 µs",
    "id: test-152842-853, time 5.002 s, sent: 31468 msg/s, received: 33091 msg/s, min/median/75th/95th/99th consumer latency: 11062/37923/53871/96208/120079 µs",
    "test stopped (Reached time limit)",
    "id: test-152842-853, sending rate avg: 19620 msg/s",
    "id: test-152842-853, receiving rate avg: 19583 msg/s",
    "id: test-152842-853, consumer latency min/median/75th/95th/99th 631/58347/122046/250245/274872 µs",
])

PERFTEST_RATE_1000 = "\n".join([
    "id: test-153444-547, starting consumer #0",
    "id: test-153444-547, starting consumer #0, channel #0",
    "id: test-153444-547, starting producer #0",
    "id: test-153444-547, starting producer #0, channel #0",
    "id: test-153444-547, time 1.001 s, sent: 956 msg/s, received: 955 msg/s, min/median/75th/95th/99th consumer latency: 254/3722/6621/13255/17043 µs",
    "id: test-153444-547, time 2.001 s, sent: 1049 msg/s, received: 1050 msg/s, min/median/75th/95th/99th consumer latency: 218/488/2443/17595/61122 µs",
    "id: test-153444-547, time 3.001 s, sent: 1000 msg/s, received: 1000 msg/s, min/median/75th/95th/99th consumer latency: 187/350/447/923/3691 µs",
    "id: test-153444-547, time 4.001 s, sent: 1002 msg/s, received: 1000 msg/s, min/median/75th/95th/99th consumer latency: 192/358/454/1182/4293 µs",
    "test stopped (Reached time limit)",
    "id: test-153444-547, sending rate avg: 1233 msg/s",
    "id: test-153444-547, receiving rate avg: 1233 msg/s",
    "id: test-153444-547, consumer latency min/median/75th/95th/99th 187/450/2218/10641/29281 µs",
])

ARTEMIS_MAX = "\n".join([
    "Connection brokerURL = tcp://127.0.0.1:61720?confirmationWindowSize=20000",
    "",
    "--- warmup false ",
    "--- sent:          1192 msg/sec ",
    "--- blocked:        899 msg/sec ",
    "--- completed:     1101 msg/sec ",
    "--- received:      1114 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:          2594 msg/sec ",
    "--- blocked:        374 msg/sec ",
    "--- completed:     2593 msg/sec ",
    "--- received:      2600 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:          2498 msg/sec ",
    "--- blocked:         59 msg/sec ",
    "--- completed:     2498 msg/sec ",
    "--- received:      2485 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:          3693 msg/sec ",
    "--- blocked:        110 msg/sec ",
    "--- completed:     3694 msg/sec ",
    "--- received:      3758 msg/sec",
    "",
    "--- SUMMARY",
    "--- result:              success",
    "--- total sent:            10036",
    "--- total blocked:          1454",
    "--- total completed:       10036",
    "--- total received:        10036 ",
    "--- aggregated send time:       mean:  37772.90 us - 50.00%:  24575.00 us - 90.00%:  72703.00 us - 99.00%: 178175.00 us - 99.90%: 356351.00 us - 99.99%: 356351.00 us - max:    417791.00 us ",
    "--- aggregated transfer time:   mean:  39321.96 us - 50.00%:  31615.00 us - 90.00%:  73215.00 us - 99.00%: 175103.00 us - 99.90%: 356351.00 us - 99.99%: 356351.00 us - max:    419839.00 us",
])

ARTEMIS_RATE_1000 = "\n".join([
    "Connection brokerURL = tcp://127.0.0.1:61720?confirmationWindowSize=20000",
    "",
    "--- warmup true  ",
    "--- sent:          1003 msg/sec ",
    "--- blocked:          1 msg/sec ",
    "--- completed:      967 msg/sec ",
    "--- received:       813 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:          1000 msg/sec ",
    "--- blocked:          0 msg/sec ",
    "--- completed:     1031 msg/sec ",
    "--- received:      1165 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:           999 msg/sec ",
    "--- blocked:          0 msg/sec ",
    "--- completed:     1000 msg/sec ",
    "--- received:       999 msg/sec",
    "",
    "--- warmup false ",
    "--- sent:           996 msg/sec ",
    "--- blocked:          0 msg/sec ",
    "--- completed:      993 msg/sec ",
    "--- received:       993 msg/sec",
    "",
    "--- SUMMARY",
    "--- result:              success",
    "--- total sent:             5197",
    "--- total blocked:             3",
    "--- total completed:        5197",
    "--- total received:         5197 ",
    "--- aggregated delay send time: mean:   1222.35 us - 50.00%:    127.00 us - 90.00%:   2351.00 us - 99.00%:  28287.00 us - 99.90%:  62207.00 us - 99.99%:  64767.00 us - max:     64767.00 us ",
    "--- aggregated send time:       mean:   3728.10 us - 50.00%:    515.00 us - 90.00%:   6399.00 us - 99.00%:  70143.00 us - 99.90%: 109055.00 us - 99.99%: 110591.00 us - max:    110591.00 us ",
    "--- aggregated transfer time:   mean:   9733.93 us - 50.00%:    563.00 us - 90.00%:  28159.00 us - 99.00%: 123391.00 us - 99.90%: 149503.00 us - 99.99%: 149503.00 us - max:    149503.00 us",
])

STOMPFAST_RATE_1000 = json.dumps({
 "schema": "stompfast.loadgen/1",
 "ok": True,
 "problems": [],
 "broker": {
  "url": "stomp://***@127.0.0.1:61720/",
  "in_process": False,
  "server": "ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine",
  "stomp_version": "1.2",
  "destinations": [
   "/queue/stompfast-bench-6aebc58c7bd4"
  ],
  "cleanup": "/queue/stompfast-bench-6aebc58c7bd4 is left on the broker (ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine): it keeps a queue until it is deleted (or, for ActiveMQ, restarted or configured to drop inactive ones); a complete run leaves it empty, an interrupted one with the messages not received"
 },
 "counts": {
  "sent": 4000,
  "confirmed": 0,
  "expected": 4000,
  "received": 4000,
  "nacked": 0,
  "distinct": 4000,
  "duplicates": 0,
  "missing": 0,
  "unexpected": 0,
  "errors": 0,
  "warmup_sent": 1000,
  "warmup_received": 1000
 },
 "rates": {
  "target_msgs_per_s": 1000.0,
  "send_msgs_per_s": 999.9,
  "receive_msgs_per_s": 999.5,
  "send_mb_per_s": 0.1,
  "receive_mb_per_s": 0.1,
  "send_seconds": 3.000303,
  "receive_seconds": 3.00157
 },
 "latency_us": {
  "count": 3000,
  "min": 301,
  "mean": 1304.181,
  "stddev": 773.4,
  "p50": 1206,
  "p90": 1888,
  "p99": 4695,
  "p99.9": 8439,
  "p99.99": 10375,
  "max": 10375
 },
 "send_lag_us": {
  "count": 4000,
  "min": 3,
  "mean": 804.191,
  "stddev": 611.188,
  "p50": 800,
  "p90": 1388,
  "p99": 2369,
  "p99.9": 6631,
  "p99.99": 9503,
  "max": 9503
 },
 "versions": {
  "stompfast": "0.1.0.dev0",
  "scanner": "c",
  "python": "3.11.7",
  "python_implementation": "CPython",
  "backend": "asyncio+uvloop",
  "anyio": "4.16.0",
  "uvloop": "0.23.0",
  "trio": "0.35.0"
 }
})


# stompfast bench --url stomp://guest:guest@127.0.0.1:61613/ --size 100 --duration 20 --warmup 5s --json
# on RabbitMQ 3.10.8 (closed loop), abridged: timeline entries keep 7 of their keys
STOMPFAST_MAX_RABBITMQ = json.dumps({"schema": "stompfast.loadgen/1", "ok": True, "problems": [], "counts": {"sent": 320300, "confirmed": 0, "expected": 320300, "received": 320300, "nacked": 0, "distinct": 320300, "duplicates": 0, "missing": 0, "unexpected": 0, "errors": 0, "warmup_sent": 115051, "warmup_received": 115051}, "rates": {"target_msgs_per_s": None, "send_msgs_per_s": 11382.5, "receive_msgs_per_s": 20196.9, "send_mb_per_s": 1.138, "receive_mb_per_s": 2.02, "send_seconds": 18.031958, "receive_seconds": 10.162414}, "latency_us": {"count": 205249, "min": 14155776, "mean": 17253879.591, "stddev": 1574449.794, "p50": 17678335, "p90": 19152895, "p99": 19644415, "p99.9": 19709951, "p99.99": 19709951, "max": 19709951}, "send_lag_us": None, "timeline": [
    {"t": 0.0, "seconds": 1.0, "sent": 58000, "received": 5666, "warmup_received": 5666, "send_rate": 58000.0, "receive_rate": 5666.0},
    {"t": 1.0, "seconds": 1.0, "sent": 14500, "received": 6204, "warmup_received": 6204, "send_rate": 14500.0, "receive_rate": 6204.0},
    {"t": 2.0, "seconds": 1.0, "sent": 27800, "received": 4230, "warmup_received": 4230, "send_rate": 27800.0, "receive_rate": 4230.0},
    {"t": 3.0, "seconds": 1.0, "sent": 0, "received": 6550, "warmup_received": 6550, "send_rate": 0.0, "receive_rate": 6550.0},
    {"t": 4.0, "seconds": 1.0, "sent": 14700, "received": 3500, "warmup_received": 3500, "send_rate": 14700.0, "receive_rate": 3500.0},
    {"t": 5.0, "seconds": 1.0, "sent": 19200, "received": 1700, "warmup_received": 1700, "send_rate": 19200.0, "receive_rate": 1700.0},
    {"t": 6.0, "seconds": 1.0, "sent": 10300, "received": 4865, "warmup_received": 4865, "send_rate": 10300.0, "receive_rate": 4865.0},
    {"t": 7.0, "seconds": 1.0, "sent": 14800, "received": 4735, "warmup_received": 4735, "send_rate": 14800.0, "receive_rate": 4735.0},
    {"t": 8.0, "seconds": 1.0, "sent": 24900, "received": 3647, "warmup_received": 3647, "send_rate": 24900.0, "receive_rate": 3647.0},
    {"t": 9.0, "seconds": 1.0, "sent": 18500, "received": 2003, "warmup_received": 2003, "send_rate": 18500.0, "receive_rate": 2003.0},
    {"t": 10.0, "seconds": 1.0, "sent": 6900, "received": 2120, "warmup_received": 2120, "send_rate": 6900.0, "receive_rate": 2120.0},
    {"t": 11.0, "seconds": 1.0, "sent": 8500, "received": 1130, "warmup_received": 1130, "send_rate": 8500.0, "receive_rate": 1130.0},
    {"t": 12.0, "seconds": 1.0, "sent": 700, "received": 7045, "warmup_received": 7045, "send_rate": 700.0, "receive_rate": 7045.0},
    {"t": 13.0, "seconds": 1.0, "sent": 25700, "received": 6368, "warmup_received": 6368, "send_rate": 25700.0, "receive_rate": 6368.0},
    {"t": 14.0, "seconds": 1.0, "sent": 16700, "received": 3737, "warmup_received": 3737, "send_rate": 16700.0, "receive_rate": 3737.0},
    {"t": 15.0, "seconds": 1.0, "sent": 0, "received": 2550, "warmup_received": 2550, "send_rate": 0.0, "receive_rate": 2550.0},
    {"t": 16.0, "seconds": 1.0, "sent": 19900, "received": 2653, "warmup_received": 2653, "send_rate": 19900.0, "receive_rate": 2653.0},
    {"t": 17.0, "seconds": 1.0, "sent": 20500, "received": 5913, "warmup_received": 5913, "send_rate": 20500.0, "receive_rate": 5913.0},
    {"t": 18.0, "seconds": 1.0, "sent": 4000, "received": 3034, "warmup_received": 3034, "send_rate": 4000.0, "receive_rate": 3034.0},
    {"t": 19.0, "seconds": 1.0, "sent": 14600, "received": 4294, "warmup_received": 4294, "send_rate": 14600.0, "receive_rate": 4294.0},
    {"t": 20.0, "seconds": 1.0, "sent": 100, "received": 4616, "warmup_received": 4616, "send_rate": 100.0, "receive_rate": 4616.0},
    {"t": 21.0, "seconds": 1.0, "sent": 0, "received": 3997, "warmup_received": 3997, "send_rate": 0.0, "receive_rate": 3997.0},
    {"t": 22.0, "seconds": 1.0, "sent": 0, "received": 7244, "warmup_received": 7244, "send_rate": 0.0, "receive_rate": 7244.0},
    {"t": 23.0, "seconds": 1.0, "sent": 0, "received": 16339, "warmup_received": 16339, "send_rate": 0.0, "receive_rate": 16339.0},
    {"t": 24.0, "seconds": 1.0, "sent": 0, "received": 18298, "warmup_received": 911, "send_rate": 0.0, "receive_rate": 18298.0},
    {"t": 25.0, "seconds": 1.0, "sent": 0, "received": 18756, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 18756.0},
    {"t": 26.0, "seconds": 1.0, "sent": 0, "received": 18491, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 18491.0},
    {"t": 27.0, "seconds": 1.0, "sent": 0, "received": 23814, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 23814.0},
    {"t": 28.0, "seconds": 1.0, "sent": 0, "received": 18726, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 18726.0},
    {"t": 29.0, "seconds": 1.0, "sent": 0, "received": 17378, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 17378.0},
    {"t": 30.0, "seconds": 1.0, "sent": 0, "received": 20618, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 20618.0},
    {"t": 31.0, "seconds": 1.0, "sent": 0, "received": 20651, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 20651.0},
    {"t": 32.0, "seconds": 1.0, "sent": 0, "received": 21359, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 21359.0},
    {"t": 33.0, "seconds": 1.0, "sent": 0, "received": 22682, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 22682.0},
    {"t": 34.0, "seconds": 0.280793, "sent": 0, "received": 5387, "warmup_received": 0, "send_rate": 0.0, "receive_rate": 19185.0}]})


ARTEMIS_LOG_LINE = "2026-11-29 15:33:43,803 INFO  [org.apache.activemq.artemis.core.server] AMQ221001: Apache ActiveMQ Artemis Message Broker version 2.40.0 [loadtools, nodeID=4263c9cc-ec0a-11f1-b56e-02fc00000001] "

PERFTEST_METADATA = """<?xml version="1.0" encoding="UTF-8"?>
<metadata>
  <groupId>com.rabbitmq</groupId>
  <artifactId>perf-test</artifactId>
  <versioning>
    <latest>2.22.1</latest>
    <release>2.22.1</release>
    <versions>
      <version>1.3.0</version>
      <version>2.16.0</version>
      <version>2.22.1</version>
    </versions>
    <lastUpdated>20261019202250</lastUpdated>
  </versioning>
</metadata>"""


# PerfTest


def test_perftest_version_from_banner() -> None:
    assert lt.parse_perftest_version(PERFTEST_VERSION_BANNER) == "2.22.1"
    assert lt.parse_perftest_version(PERFTEST_MAX) is None  # a run does not print the banner


def test_perftest_intervals() -> None:
    rows = lt.parse_perftest_intervals(PERFTEST_MAX)
    assert len(rows) == 5
    assert rows[0] == (1.001, 15534, 13362)
    assert rows[-1] == (5.002, 31468, 33091)


def test_perftest_summary_in_microseconds() -> None:
    s = lt.parse_perftest_summary(PERFTEST_MAX)
    assert s["send_rate"] == 19620
    assert s["receive_rate"] == 19583
    assert s["latency_us"] == {"min": 631.0, "p50": 58347.0, "p75": 122046.0, "p95": 250245.0, "p99": 274872.0}


def test_perftest_summary_ignores_per_second_latency() -> None:
    # the per-second lines have "consumer latency:" with a colon; only the closing line counts
    s = lt.parse_perftest_summary(PERFTEST_RATE_1000)
    assert s["latency_us"]["p50"] == 450.0
    assert s["latency_us"]["p99"] == 29281.0


def test_perftest_summary_in_milliseconds() -> None:
    # with -ms/--use-millis PerfTest prints the same line in ms: the same parser, scaled
    line = PERFTEST_RATE_1000.replace("187/450/2218/10641/29281 µs", "0/0/2/10/29 ms")
    assert lt.parse_perftest_summary(line)["latency_us"]["p99"] == 29000.0


def test_perftest_summary_of_a_failed_run() -> None:
    assert lt.parse_perftest_summary("Connection refused") == {}


def test_perftest_figures_leave_out_the_warmup() -> None:
    f = lt.perftest_figures(PERFTEST_RATE_1000, warmup=1.0, duration=4.0)
    assert f["receive_rate"] == pytest.approx((1050 + 1000 + 1000) / 3)
    assert f["received"] == pytest.approx(955 * 1.001 + 1050 + 1000 + 1000, abs=1)
    assert f["latency_us"]["p99"] == 29281.0
    g = lt.perftest_figures(PERFTEST_MAX, warmup=0.0, duration=5.0)
    assert g["receive_rate"] == pytest.approx((13362 + 18705 + 15778 + 17089 + 33091) / 5)


# artemis perf client


def test_artemis_intervals() -> None:
    blocks = lt.parse_artemis_intervals(ARTEMIS_RATE_1000)
    assert [b["warmup"] for b in blocks] == [True, False, False, False]
    assert blocks[0] == {"warmup": True, "sent": 1003, "blocked": 1, "completed": 967, "received": 813}
    assert [b["received"] for b in lt.parse_artemis_intervals(ARTEMIS_MAX)] == [1114, 2600, 2485, 3758]


def test_artemis_summary_max() -> None:
    s = lt.parse_artemis_summary(ARTEMIS_MAX)
    assert s["result"] == "success"
    assert s["totals"] == {"sent": 10036, "blocked": 1454, "completed": 10036, "received": 10036}
    assert set(s["latency_us"]) == {"send", "transfer"}
    assert s["latency_us"]["transfer"] == {"mean": 39321.96, "p50": 31615.0, "p90": 73215.0, "p99": 175103.0,
                                           "p99.9": 356351.0, "p99.99": 356351.0, "max": 419839.0}


def test_artemis_summary_rate_has_delay_send() -> None:
    s = lt.parse_artemis_summary(ARTEMIS_RATE_1000)
    assert set(s["latency_us"]) == {"delay send", "send", "transfer"}
    assert s["latency_us"]["delay send"]["p99"] == 28287.0
    assert s["latency_us"]["transfer"]["p50"] == 563.0
    assert s["latency_us"]["transfer"]["max"] == 149503.0


def test_artemis_summary_missing() -> None:
    assert lt.parse_artemis_summary("Connection brokerURL = tcp://127.0.0.1:61720\n") == {}


def test_artemis_figures() -> None:
    f = lt.artemis_figures(ARTEMIS_RATE_1000, warmup=2.0, duration=5.0)
    assert f["receive_rate"] == pytest.approx((1165 + 999 + 993) / 3)
    assert f["received"] == 5197
    assert f["result"] == "success"
    assert f["latency_us"]["p99"] == 123391.0
    assert f["send_delay_us"]["p50"] == 127.0
    m = lt.artemis_figures(ARTEMIS_MAX, warmup=1.0, duration=4.0)
    assert m["receive_rate"] == pytest.approx((1114 + 2600 + 2485) / 3)  # at most duration - warm-up intervals
    m = lt.artemis_figures(ARTEMIS_MAX, warmup=0.0, duration=4.0)
    assert m["receive_rate"] == pytest.approx((1114 + 2600 + 2485 + 3758) / 4)
    assert m["send_delay_us"] is None


def test_artemis_histogram_line() -> None:
    h = lt.parse_artemis_histogram("mean:    259.35 us - 50.00%:     45.00 us - 99.99%: 104447.00 us - max:    109567.00 us ")
    assert h == {"mean": 259.35, "p50": 45.0, "p99.99": 104447.0, "max": 109567.0}


def test_artemis_broker_version() -> None:
    assert lt.parse_artemis_broker_version(ARTEMIS_LOG_LINE) == "2.40.0"
    assert lt.parse_artemis_broker_version("") is None


# stompfast bench --json


def test_stompfast_json() -> None:
    f = lt.parse_stompfast_json(STOMPFAST_RATE_1000, warmup=1.0, duration=4.0)
    assert f["ok"] is True
    assert f["version"] == "0.1.0.dev0"
    assert f["server"].startswith("ActiveMQ-Artemis/2.40.0")
    assert f["own_rate"] == 999.5
    assert f["receive_rate"] is None  # this capture has no timeline
    assert f["received"] == 4000  # warm-up included, as the CPU figure wants
    assert f["latency_us"] == {"p50": 1206, "p99": 4695, "max": 10375}
    assert f["send_lag_us"] == {"p50": 800, "p99": 2369, "max": 9503}


def test_stompfast_json_closed_loop_has_no_send_lag() -> None:
    d = json.loads(STOMPFAST_RATE_1000)
    d["send_lag_us"] = None
    assert lt.parse_stompfast_json(json.dumps(d), 1.0, 4.0)["send_lag_us"] is None


def test_stompfast_rate_while_producing_leaves_out_the_drain() -> None:
    # On RabbitMQ the consumer got ~4,000 msgs/s while the producer flooded the queue, then drained
    # the backlog at ~20,000 msgs/s: receive_msgs_per_s (first to last measured message) is the drain
    f = lt.parse_stompfast_json(STOMPFAST_MAX_RABBITMQ, warmup=5.0, duration=20.0)
    assert f["own_rate"] == 20196.9
    assert f["receive_rate"] == pytest.approx(
        (1700 + 4865 + 4735 + 3647 + 2003 + 2120 + 1130 + 7045 + 6368 + 3737 + 2550 + 2653 + 5913 + 3034 + 4294) / 15)
    assert f["received"] == 320300
    assert f["latency_us"]["p50"] > 1_000_000  # closed loop: queueing behind the backlog


def test_sustained_rate_window() -> None:
    timeline = [{"t": 0.0, "receive_rate": 1.0}, {"t": 1.0, "receive_rate": 10.0}, {"t": 2.0, "receive_rate": 20.0},
                {"t": 3.0, "receive_rate": 99.0}]
    assert lt.sustained_rate(timeline, warmup=1.0, duration=3.0) == 15.0
    assert lt.sustained_rate([], 1.0, 3.0) is None


# Maven metadata, table helpers


def test_maven_versions_newest_first() -> None:
    assert lt.parse_maven_versions(PERFTEST_METADATA) == ["2.22.1", "2.16.0", "1.3.0"]


def test_ratio_and_formats() -> None:
    assert lt.ratio(15765, 20633) == "0.76x"
    assert lt.ratio(None, 1.0) == "n/a"
    assert lt.ratio(1.0, 0) == "n/a"
    assert lt.fmt_ms(1206) == "1.21 ms"
    assert lt.fmt_ms(175103) == "175 ms"
