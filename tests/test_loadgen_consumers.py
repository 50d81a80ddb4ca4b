"""``stompfast bench`` consumers that behave like applications: processing time, NACKs, pauses.

The pure parts (the config's checks, a consumer's decisions, the backlog report from a
timeline) are tested alone; runs on the in-process broker check that a NACKed delivery
is counted once, by its redelivery (nothing lost, nothing twice), that no message is
taken during a pause, and that a processing time holds each message; the installed
command checks the flags. The same runs against the real brokers, and the NACK share
refused where a NACK loses the message: tests/integration/test_loadgen_brokers.py.
"""

from __future__ import annotations

import json

import pytest
from test_loadgen import assert_exact, bench

from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, run_load
from stompfast.loadgen.behaviour import ConsumerBehaviour, backlog_rows, last_resume
from stompfast.loadgen.worker import _check_nack_requeues

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("options, said", [
    ({"processing_time": (0.2, 0.1)}, "0 <= low <= high"),
    ({"processing_time": 0.1}, "processing_time must be"),
    ({"nack_share": 1.0}, "up to \\(not including\\) 1"),
    ({"nack_share": 0.1}, "needs ack='client-individual'"),
    ({"consumer_pauses": ((1.0, 0.0),)}, "length > 0"),
    ({"consumer_pauses": ((1.0, 1.0),), "consumers": 0}, "need consumers"),
])
def test_a_consumer_option_that_cannot_work_is_refused(options, said):
    with pytest.raises(ConfigurationError, match=said):
        LoadConfig(**options).validate()


def test_a_nack_share_is_refused_on_a_broker_that_drops_a_nacked_message():
    config = LoadConfig(ack="client-individual", nack_share=0.1)
    for server in ("ActiveMQ/5.17.2", "ActiveMQ-Artemis/2.40.0 ActiveMQ Artemis Messaging Engine"):
        with pytest.raises(ConfigurationError, match="requeues a NACKed message"):
            _check_nack_requeues(config, server)
    _check_nack_requeues(config, "RabbitMQ/4.3.0")
    _check_nack_requeues(LoadConfig(), "ActiveMQ/5.17.2")


def test_a_consumers_decisions_are_repeatable():
    first = ConsumerBehaviour((0.001, 0.003), 0.25, (), 0, consumer=3)
    again = ConsumerBehaviour((0.001, 0.003), 0.25, (), 0, consumer=3)
    decisions = [(first.nacks(), first.processing_seconds()) for _ in range(400)]
    assert decisions == [(again.nacks(), again.processing_seconds()) for _ in range(400)]
    assert 60 < sum(nack for nack, _ in decisions) < 140
    assert all(0.001 <= seconds <= 0.003 for _, seconds in decisions)
    assert first.per_message and not ConsumerBehaviour((0, 0), 0, ((1, 1),), 0, 0).per_message
    assert last_resume(((1.0, 2.0), (0.0, 0.5))) == 3.0 and last_resume(()) == 0.0


def test_the_backlog_report_follows_sent_minus_received():
    # 100 msgs/s sent; consumers paused from 1 s to 3 s, then 300/s until caught up
    received = [100, 0, 0, 300, 100, 100]
    timeline = [{"t": float(t), "seconds": 1.0, "sent": 100, "received": r} for t, r in enumerate(received)]
    (row,) = backlog_rows(((1.0, 2.0),), timeline)
    assert row == {"at": 1.0, "seconds": 2.0, "backlog_before": 0, "peak_backlog": 200, "drain_seconds": 1.0,
                   "drain_rate": 300.0}
    # not drained before the run ended
    (short,) = backlog_rows(((1.0, 2.0),), timeline[:3])
    assert short["peak_backlog"] == 200 and short["drain_seconds"] is None and short["drain_rate"] is None


@pytest.mark.anyio
async def test_nacked_deliveries_are_counted_once_by_their_redelivery():
    result = await run_load(LoadConfig(count=2000, ack="client-individual", nack_share=0.3, producers=2,
                                       consumers=2, buffer_size=50))
    assert_exact(result, 2000)
    # about 0.3 / 0.7 of 2,000 redeliveries; the generator is seeded, the broker's order is not
    assert 400 < result.counts["nacked"] < 1300
    assert result.to_dict()["counts"]["nacked"] == result.counts["nacked"]


@pytest.mark.anyio
async def test_no_message_is_taken_during_a_pause_and_its_backlog_drains():
    result = await run_load(LoadConfig(rate=2000, duration=1.5, consumer_pauses=((0.3, 0.5),), interval=0.1))
    assert_exact(result, 3000)
    inside = [row for row in result.timeline if 0.3 <= row["t"] and row["t"] + row["seconds"] <= 0.8 + 1e-9]
    assert len(inside) == 5 and all(row["received"] == 0 for row in inside), inside
    (pause,) = result.backlog
    assert (pause["at"], pause["seconds"]) == (0.3, 0.5)
    assert pause["peak_backlog"] > pause["backlog_before"] and pause["drain_seconds"] is not None
    assert result.to_dict()["backlog"] == [pause]


@pytest.mark.anyio
async def test_a_processing_time_holds_each_message():
    result = await run_load(LoadConfig(count=200, processing_time=(0.002, 0.002), ack="client-individual"))
    assert_exact(result, 200)
    # 200 messages one after another, each held 2 ms (a timer may fire up to 1 ms early)
    assert result.rates["receive_seconds"] >= 200 * 0.001


def test_bench_consumer_flags():
    run = bench("--rate", "1000", "--duration", "1", "--consumer-delay", "0.3", "--ack", "client-individual",
                "--nack-share", "0.1", "--processing-time", "0.1ms..0.2ms", "-q", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["config"]["consumer_pauses"] == [[0.0, 0.3]]
    assert document["config"]["processing_time"] == [0.0001, 0.0002] and document["config"]["nack_share"] == 0.1
    assert document["counts"]["received"] == 1000 and len(document["backlog"]) == 1
    for bad, said in ((["--nack-share", "0.1"], b"needs ack='client-individual'"),
                      (["--consumer-pause", "1s"], b"AT:LENGTH"),
                      (["--nack-share", "1"], b"not including"),
                      (["--processing-time", "soon"], b"not a duration")):
        refused = bench(*bad, "-q")
        assert refused.returncode == 2 and said in refused.stderr, (bad, refused.stderr)
