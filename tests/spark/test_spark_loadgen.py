"""format("stomp-loadgen") / run_cluster_load: per-worker stats rows merged on the driver."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def test_loadgen_source_totals_match_the_broker(spark: Any, target: Any) -> None:
    from stompfast.loadgen import LoadConfig
    from stompfast.spark import run_cluster_load

    n = 2000
    prefix = target.queue()
    before = target.broker.stats if target.broker is not None else None
    result = run_cluster_load(spark, LoadConfig(url=target.url, count=n, receipts=True, drain_timeout=5.0,
                                                destinations=(prefix,), slo=("received==2000,p99<60s", "p50<1us")),
                              workers=2)
    assert result.ok, result.problems
    # the objectives are judged once, on both tasks' merged counts and histogram
    assert [(j.objective.text, j.value, j.ok) for j in result.slo][:1] == [("received==2000", 2000.0, True)]
    assert [j.ok for j in result.slo] == [True, True, False]
    assert result.slo[2].value == float(result.histogram.get_value_at_percentile(50.0))
    assert [o["ok"] for o in result.to_dict()["slo"]] == [True, True, False]
    assert len(result.rows) == 2 and {r["worker"] for r in result.rows} == {0, 1}
    c = result.counts
    assert c["sent"] == c["confirmed"] == c["received"] == c["distinct"] == n
    assert c["missing"] == c["duplicates"] == c["errors"] == 0
    assert result.latency_us is not None and result.latency_us["count"] == n
    assert result.rates["receive_msgs_per_s"] and result.rates["wall_msgs_per_s"]
    stats = result.client_stats  # the clients' own metrics, summed over both tasks (receipt buckets too)
    assert stats["clients"] == 4 and stats["messages_sent"] == stats["messages_received"] == n
    assert stats["receipt_rtt"]["count"] == stats["receipts_confirmed"] >= n and stats["receipt_rtt"]["p99"]
    if before is not None:  # the broker's own counters
        after = target.broker.stats
        sends = after.frames_in.get("SEND", 0) - before.frames_in.get("SEND", 0)
        delivered = after.frames_out.get("MESSAGE", 0) - before.frames_out.get("MESSAGE", 0)
        assert sends == n and delivered == n
    for worker in range(2):  # nothing left on any worker's queue
        assert target.wait_depth(f"{prefix}-{worker}", 0, timeout=10) in (0, None)


def test_loadgen_source_as_a_dataframe(spark: Any, broker_thread: Any) -> None:
    rows = (spark.read.format("stomp-loadgen").option("url", broker_thread.url).option("count", "300")
            .option("workers", "2").load().collect())
    assert sorted(r.worker for r in rows) == [0, 1]
    assert sum(r.sent for r in rows) == sum(r.received for r in rows) == 300
    assert all(r.histogram for r in rows)


def test_loadgen_options_take_the_bench_forms_of_shapes_sizes_and_consumers() -> None:
    from stompfast.loadgen import Stage
    from stompfast.spark._loadgen import StompLoadgenReader

    reader = StompLoadgenReader({
        "url": "stomp://127.0.0.1:61613/", "workers": "2", "rate": "1000:1s,0..2000:1s", "size": "10..20",
        "ack": "client-individual", "nackShare": "0.1", "processingTime": "1ms..2ms",
        "consumerPauses": "1s:0.5s, 2s:1s",
    })
    values = reader._values_for(0)
    # the shape is the cluster's: each of the two workers sends half of it
    assert values["rate_shape"] == (Stage(500, 500, 1), Stage(0, 1000, 1)) and "rate" not in values
    assert values["sizes"] == ((10, 20, 1.0),) and values["nack_share"] == 0.1
    assert values["processing_time"] == (0.001, 0.002) and values["consumer_pauses"] == ((1.0, 0.5), (2.0, 1.0))


def test_loadgen_refuses_a_failover_run_over_spark_tasks() -> None:
    from stompfast.errors import ConfigurationError
    from stompfast.spark._loadgen import StompLoadgenReader

    with pytest.raises(ConfigurationError, match="runs in one stompfast bench"):
        StompLoadgenReader({"url": "stomp://127.0.0.1:61613/", "rate": "100", "linkCuts": "1s"})


def test_a_load_config_travels_as_options_in_the_bench_forms() -> None:
    # run_cluster_load writes each LoadConfig field as an option; the reader must get the same config back
    import dataclasses

    from stompfast.loadgen import LoadConfig, Stage
    from stompfast.spark._loadgen import _BENCH_FORMS, StompLoadgenReader

    config = LoadConfig(url="stomp://127.0.0.1:61613/", rate_shape=(Stage(100, 300, 2.5),),
                        sizes=((10, 20, 3.0), (99, 99, 1.0)), processing_time=(0.001, 0.002),
                        consumer_pauses=((1.0, 0.5),), start_spread=0.25, ack="client-individual", nack_share=0.1)
    opts = {"workers": "1"}
    for field in dataclasses.fields(config):
        if field.name in _BENCH_FORMS:
            name, text = _BENCH_FORMS[field.name]
            opts[name] = text(getattr(config, field.name))
    opts.update(url=config.url, start_spread="0.25", ack="client-individual", nack_share="0.1")
    values = StompLoadgenReader(opts)._values_for(0)
    for name in ("rate_shape", "sizes", "processing_time", "consumer_pauses", "start_spread", "nack_share"):
        assert values[name] == getattr(config, name), name
    # the default values are not sent at all
    assert not any(any(getattr(LoadConfig(), name)) for name in _BENCH_FORMS)
