"""client.stats(): counters equal what went over the wire, on both clients, every backend.

The in-process broker counts every frame it received and sent, by command
(``Broker.stats``): our frames out are its frames in, and the reverse, and our
message counts are what the test sent and took.
"""

from __future__ import annotations

import math
import threading

import anyio
import pytest

from stompfast import AsyncClient, Client, ClientStats, ReconnectPolicy, RttSummary
from stompfast._stats import RTT_BOUNDS, RttHistogram
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
N = 50


def check_against(stats: ClientStats, broker_stats) -> None:
    """Our frames are the broker's, the other way round (heart-beats off)."""
    assert stats.frames_out == sum(broker_stats.frames_in.values()), (stats, broker_stats.frames_in)
    assert stats.frames_in == sum(broker_stats.frames_out.values()), (stats, broker_stats.frames_out)
    assert stats.messages_sent == broker_stats.frames_in.get("SEND", 0)
    assert stats.messages_received == broker_stats.frames_out.get("MESSAGE", 0)
    assert stats.acks == broker_stats.frames_in.get("ACK", 0)
    assert stats.nacks == broker_stats.frames_in.get("NACK", 0)
    assert stats.receipts_confirmed == broker_stats.frames_out.get("RECEIPT", 0)


@pytest.mark.anyio
async def test_the_async_clients_counters_are_what_crossed_the_wire():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST) as client:
            fresh = client.stats()
            assert fresh.messages_sent == 0 and fresh.frames_out == 1 and fresh.frames_in == 1  # CONNECT/ED
            async with client.subscribe("/queue/stats", ack="client-individual") as sub:
                for i in range(N):
                    await client.send("/queue/stats", b"m%d" % i)  # the plain, uncounted-per-call path
                await client.send("/queue/stats", "text", headers={"x": "1"}, receipt=True)
                taken = 0
                with anyio.fail_after(10):
                    async for message in sub:
                        taken += 1
                        if taken == 1:
                            await message.nack()
                        else:
                            await message.ack()
                        if taken == N + 2:  # (the NACKed one comes again)
                            break
                await client.flush()
                assert client.stats().buffered == {sub.id: 0}
            await client.flush()  # (the UNSUBSCRIBE is at the broker)
            stats = client.stats()
            assert stats.buffered == {}
            assert stats.messages_sent == N + 1
            assert stats.messages_received == N + 2 and stats.acks == N + 1 and stats.nacks == 1
            assert stats.receipts_pending == 0 and stats.bytes_queued == 0 and stats.receipts_failed == 0
            assert stats.receipt_rtt.count == stats.receipts_confirmed >= 4  # SUBSCRIBE, the send, two flushes
            # measured with a clock finer than uvloop's (whole milliseconds: a local round trip read as 0)
            assert stats.receipt_rtt.sum > 0
            assert stats.bytes_out > stats.frames_out and stats.bytes_in > stats.frames_in
            check_against(stats, broker.stats)
            assert stats.connection_losses == 0 and stats.reconnects == 0 and stats.errors == 0


@pytest.mark.anyio
async def test_a_lost_connection_and_its_reconnect_show_in_the_counters():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST) as client:
            await client.send("/queue/lost", b"before", receipt=True)
            broker.withhold_receipts()
            pending = await client.send("/queue/lost", b"unconfirmed", receipt=True, wait=False)
            with anyio.fail_after(10):
                while broker.stats.frames_in.get("SEND", 0) < 2:
                    await anyio.sleep(0.005)
            broker.drop_connections()
            with anyio.fail_after(10):
                while client.reconnects < 1:
                    await anyio.sleep(0.005)
            assert pending.done() and pending.error is not None
            broker.clear_faults()
            await client.send("/queue/lost", b"after", receipt=True)
            stats = client.stats()
            assert stats.connection_losses == 1 and stats.reconnects == 1
            assert stats.receipts_failed == 1 and stats.messages_sent == 3


@pytest.mark.anyio
async def test_an_error_frame_counts_as_an_error_and_a_loss():
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST) as client:
            broker.send_error("go away")
            with anyio.fail_after(10):
                while client.reconnects < 1:
                    await anyio.sleep(0.005)
            stats = client.stats()
            assert stats.errors == 1 and stats.connection_losses == 1


def test_the_blocking_clients_readme_loop_is_counted_and_stats_read_from_any_thread():
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0)) as client:
            with client.subscribe("/queue/sync-stats", ack="client-individual") as sub:
                for i in range(N):
                    client.send("/queue/sync-stats", b"m%d" % i)
                client.send("/queue/sync-stats", b"last", receipt=True)
                for taken, message in enumerate(sub, 1):
                    message.ack()
                    if taken == N + 1:
                        break
                seen = []
                reader = threading.Thread(target=lambda: seen.append(client.stats()))
                reader.start()
                reader.join()
            client.flush()  # (the UNSUBSCRIBE is at the broker)
            stats = client.stats()
            assert seen and isinstance(seen[0], ClientStats)
            assert stats.messages_sent == N + 1 and stats.messages_received == N + 1 and stats.acks == N + 1
            check_against(stats, broker.stats)


def test_the_round_trip_histogram_buckets_and_quantiles():
    h = RttHistogram()
    for seconds in (0.0, 40e-6, 0.001, 0.001, 0.002, 0.5, 120.0):
        h.record(seconds)
    summary = h.summary()
    assert summary.count == 7 and summary.sum == pytest.approx(120.504040, rel=1e-6)
    bounds = [b for b, _ in summary.buckets]
    assert bounds[:-1] == list(RTT_BOUNDS) and bounds[-1] == math.inf
    assert [c for _, c in summary.buckets] == sorted(c for _, c in summary.buckets)  # cumulative
    assert summary.buckets[-1][1] == 7
    assert summary.quantile(2 / 7) == RTT_BOUNDS[0]  # 0 and 40 µs: the first bucket
    p50 = summary.quantile(0.5)
    assert 0.001 <= p50 <= 0.001 * 1.5 + 1e-9  # within one bucket above the true value
    assert summary.quantile(1.0) == math.inf  # 120 s is above the last bound
    for value in (RTT_BOUNDS[3], RTT_BOUNDS[3] * 1.0001):  # on a bound, just above it
        one = RttHistogram()
        one.record(value)
        assert one.summary().quantile(1.0) >= value
    with pytest.raises(ValueError):
        summary.quantile(0)
    assert ClientStats().as_dict()["receipt_rtt"] == {"count": 0, "sum": 0.0, "mean": 0.0, "p50": None,
                                                       "p90": None, "p99": None, "buckets": []}
    # JSON has no infinity: a quantile above the last bound is None; the summary reads back as it was
    written = summary.as_dict()
    assert written["p50"] == p50 and written["p99"] is None and written["buckets"][-1] == [RTT_BOUNDS[-1], 6]
    assert RttSummary.from_dict(written) == summary


def test_merged_summaries_have_the_quantiles_of_every_round_trip_together():
    from stompfast._stats import merge_summaries

    fast, slow, both = RttHistogram(), RttHistogram(), RttHistogram()
    for i, seconds in enumerate([0.0002] * 90 + [0.003] * 9 + [0.4]):
        (fast if i % 2 else slow).record(seconds)
        both.record(seconds)
    merged = merge_summaries([fast.summary(), slow.summary(), RttSummary()])  # an empty one: no buckets
    assert merged == both.summary()
    for q in (0.5, 0.9, 0.99, 1.0):
        assert merged.quantile(q) == both.summary().quantile(q)
    assert merge_summaries([]) == RttSummary()
    with pytest.raises(ValueError):
        merge_summaries([both.summary(), RttSummary(count=1, sum=1.0, buckets=((1.0, 1), (math.inf, 1)))])
