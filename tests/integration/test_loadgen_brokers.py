"""The load generator against real brokers: RabbitMQ (rabbitmq_stomp), ActiveMQ Classic and Artemis.

Counting must be exact on a real broker too: every message sent is received once from
a queue (once per consumer from a topic), with receipts and each ack mode,
transactions, several connections and worker processes. Each test uses a fresh queue,
so leftovers of other runs never mix in (they would show as ``unexpected``). A broker
that does not answer is skipped, or fails with ``STOMPFAST_REQUIRE_BROKERS=1``
(conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from brokerenv import rabbitmq_node, rabbitmqctl
from test_loadgen_failover import assert_outages_add_up

from stompfast import loadgen
from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, LoadResult, run_load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

N = 3000
BROKERS_SCRIPT = os.environ.get("STOMPFAST_BROKERS_SCRIPT") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "brokers.sh")


def config(url: str, **kwargs) -> LoadConfig:
    kwargs.setdefault("destinations", (f"/queue/stompfast-lg-{uuid.uuid4().hex[:12]}",))
    kwargs.setdefault("count", N)
    kwargs.setdefault("drain_timeout", 10.0)
    return LoadConfig(url=url, **kwargs)


def assert_exact(result: LoadResult, sent: int, copies: int = 1) -> None:
    c = result.counts
    assert result.ok, (result.problems, result.errors)
    assert c["sent"] == sent and c["expected"] == sent * copies
    assert c["received"] == c["distinct"] == sent * copies
    assert c["duplicates"] == c["missing"] == c["unexpected"] == c["errors"] == 0
    assert result.latency_us is not None and result.latency_us["count"] == sent * copies
    assert not result.broker["in_process"] and result.broker["server"]


@pytest.mark.anyio
@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
async def test_queue_counts_exactly_with_receipts(broker_url: str, ack: str) -> None:
    result = await run_load(config(broker_url, producers=2, consumers=2, ack=ack, receipts=True,
                                   receipt_window=200, buffer_size=200))
    assert_exact(result, N)
    assert result.counts["confirmed"] == N


@pytest.mark.anyio
async def test_queue_counts_exactly_without_receipts(broker_url: str) -> None:
    result = await run_load(config(broker_url))
    assert_exact(result, N)
    assert result.rates["send_msgs_per_s"] and result.rates["receive_msgs_per_s"]


@pytest.mark.anyio
async def test_transactions(broker_url: str) -> None:
    result = await run_load(config(broker_url, count=1001, transaction_size=10, receipts=True,
                                   ack="client-individual"))
    assert_exact(result, 1001)
    assert result.counts["confirmed"] == 1001


@pytest.mark.anyio
async def test_topic_with_two_consumers_receives_twice(broker_url: str) -> None:
    topic = f"/topic/stompfast-lg-{uuid.uuid4().hex[:12]}"
    result = await run_load(config(broker_url, destinations=(topic,), consumers=2, receipts=True))
    assert_exact(result, N, copies=2)


@pytest.mark.anyio
async def test_fixed_rate(broker_url: str) -> None:
    result = await run_load(config(broker_url, rate=1000, duration=2, count=None))
    assert_exact(result, 2000)
    assert abs(result.rates["send_msgs_per_s"] - 1000) <= 50


@pytest.mark.anyio
async def test_a_consumer_pause_builds_a_backlog_that_drains(broker_url: str) -> None:
    result = await run_load(config(broker_url, rate=2000, duration=2, count=None, consumer_pauses=((0.5, 0.5),),
                                   interval=0.25))
    assert_exact(result, 4000)
    (pause,) = result.backlog
    assert pause["peak_backlog"] > pause["backlog_before"] and pause["drain_seconds"] is not None, pause


@pytest.mark.anyio
async def test_a_nack_share_counts_once_where_nack_requeues_and_is_refused_where_it_loses(
    broker: str, broker_url: str
) -> None:
    # RabbitMQ requeues a NACKed message; ActiveMQ Classic and Artemis drop it (docs/brokers.md),
    # which the run would report as missing: it is refused before anything is sent.
    nacking = config(broker_url, ack="client-individual", nack_share=0.2, count=1000, processing_time=(0.0001, 0.0002))
    if broker == "rabbitmq":
        result = await run_load(nacking)
        assert_exact(result, 1000)
        assert result.counts["nacked"] > 0
    else:
        with pytest.raises(ConfigurationError, match="requeues a NACKed message"):
            await run_load(nacking)


@pytest.mark.anyio
async def test_a_failover_run_counts_each_outage_exactly(broker_url: str) -> None:
    # The links reset twice through the fault proxy; the clients reconnect. What the outages
    # count must be the run's own exact counts, whatever each broker lost or redelivered.
    result = await run_load(config(broker_url, rate=1000, duration=2.5, count=None, link_cuts=(0.8, 1.6),
                                   ack="client-individual", drain_timeout=2.0))
    assert_outages_add_up(result, 2)
    assert result.counts["received"] >= 2000


@pytest.mark.anyio
@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
async def test_a_failover_run_across_a_broker_restart_counts_each_outage_exactly(broker_url: str) -> None:
    # The outage is a real one: the RabbitMQ node restarts under a constant load (no proxy),
    # and the clients reconnect to it when it is back. Whatever the restart lost (messages in
    # flight, a transient backlog), the outage's counts are the run's own exact counts.
    restart = f"bash {BROKERS_SCRIPT} restart {rabbitmq_node()}"
    result = await run_load(config(broker_url, rate=500, duration=4.0, count=None, link_cuts=(1.0,),
                                   cut_command=restart, ack="client-individual", drain_timeout=3.0))
    assert_outages_add_up(result, 1)
    run = result.outages[1]["command"]
    assert run["returncode"] == 0, run["output"]
    # the outage lasted as long as the broker was away, and messages sent after it arrived
    assert result.outages[1]["gap_s"] > 0.1
    assert result.counts["received"] > 500 * 1.0 + 100


def test_process_mode(broker_url: str) -> None:
    result = loadgen.run(config(broker_url, producers=2, consumers=2, processes=2, receipts=True,
                                ack="client-individual"))
    assert_exact(result, N)


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
def test_bench_command_against_rabbitmq(broker_url: str) -> None:
    """``stompfast bench`` as installed, against RabbitMQ, the URL and credentials from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env["STOMPFAST_URL"] = broker_url
    done = subprocess.run(
        [sys.executable, "-m", "stompfast", "bench", "--count", "5000", "--receipts", "--json", "-q"],
        stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["broker"]["server"].startswith("RabbitMQ")
    assert doc["counts"]["received"] == doc["counts"]["confirmed"] == 5000
    assert "guest:guest" not in done.stdout.decode()


# -- the run's own queue does not outlive the run ------------------------------------------------


def _rabbitmq_queues() -> dict:
    """The queues of the RabbitMQ under test as ``{name: (messages, durable, auto_delete)}``, or skip."""
    done = rabbitmqctl("-q", "list_queues", "name", "messages", "durable", "auto_delete")
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl cannot list the queues here: {done.stderr.strip()[:200]}")
    queues = {}
    for line in done.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[1].isdigit():
            queues[parts[0]] = (int(parts[1]), parts[2] == "true", parts[3] == "true")
    return queues


def _bench(url: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env["STOMPFAST_URL"] = url
    return subprocess.Popen(
        [sys.executable, "-m", "stompfast", "bench", "--json", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
@pytest.mark.parametrize("consumers", ["1", "0"])
def test_bench_leaves_no_queue_on_rabbitmq(broker_url: str, consumers: str) -> None:
    # consumers 0: an auto-delete queue that never had a consumer stays, so the end sweeps it
    proc = _bench(broker_url, "--count", "2000", "--consumers", consumers, "-q")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    doc = json.loads(out)
    (queue,) = doc["broker"]["destinations"]
    assert queue.rpartition("/")[2] not in _rabbitmq_queues()
    assert "gone" in doc["broker"]["cleanup"]


@pytest.mark.parametrize("broker", ["rabbitmq"], indirect=True)
def test_an_interrupted_bench_leaves_no_queue_or_backlog_on_rabbitmq(broker_url: str) -> None:
    import signal
    import time

    before = set(_rabbitmq_queues())
    proc = _bench(broker_url, "--count", "100000000")
    try:
        deadline = time.monotonic() + 60
        while True:  # the run's queue exists, auto-delete, with a backlog
            mine = {n: q for n, q in _rabbitmq_queues().items() if n.startswith("stompfast-bench-") and n not in before}
            if any(messages > 0 for messages, _, _ in mine.values()):
                break
            assert time.monotonic() < deadline and proc.poll() is None, "no backlog built up"
            time.sleep(0.5)
        ((name, (_, durable, auto_delete)),) = mine.items()
        assert durable and auto_delete
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    doc = json.loads(out)
    assert doc["interrupted"] == "interrupted (Ctrl-C)" and doc["counts"]["received"] > 0
    assert doc["broker"]["destinations"] == [f"/queue/{name}"]
    assert name not in _rabbitmq_queues()


@pytest.mark.parametrize("broker", ["activemq"], indirect=True)
@pytest.mark.anyio
async def test_the_run_says_what_it_leaves_on_activemq(broker_url: str) -> None:
    result = await run_load(LoadConfig(url=broker_url, count=500))
    (queue,) = result.broker["destinations"]
    assert result.ok and f"{queue} is left on the broker" in result.broker["cleanup"]


@pytest.mark.anyio
async def test_objectives_are_judged_on_a_real_broker(broker_url: str) -> None:
    # A fixed-rate run: the loss and rate objectives must hold on every broker, a latency
    # objective no broker can meet must be missed, each judged on the run's own numbers.
    result = await run_load(config(broker_url, count=1000, rate=1000, receipts=True,
                                   slo=("missing==0,duplicates==0,confirmed==1000", "rate>=0.9*target", "p99<1us")))
    assert_exact(result, 1000)
    met = {j.objective.text: j.ok for j in result.slo}
    assert met == {"missing==0": True, "duplicates==0": True, "confirmed==1000": True, "rate>=0.9*target": True,
                   "p99<1us": False}, [j.describe() for j in result.slo]
    assert result.slo_met is False
