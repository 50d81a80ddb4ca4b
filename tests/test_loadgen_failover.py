"""``stompfast bench --cut-links``: a constant-rate load through link cuts, each outage counted per message.

The attribution (:func:`stompfast.loadgen.failover.outage_rows`) is pure and tested on
made-up delivery logs; a run on the in-process broker through the fault proxy checks
that the outages add up to the run's own exact counts (every lost message is one
missing, every extra delivery one duplicate) and that the clients came back; the
installed command checks the flag. The same run on RabbitMQ, ActiveMQ Classic and
Artemis: tests/integration/test_loadgen_brokers.py.
"""

from __future__ import annotations

import json
import time

import pytest
from test_loadgen import bench

from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, LoadResult, run_load
from stompfast.loadgen.failover import outage_rows

pytestmark = pytest.mark.timeout(120)

S = 1_000_000_000


def test_each_outage_is_counted_message_by_message():
    # one producer at 100 msgs/s from t0 = 0; the link is cut at 1 s
    t0 = 0
    log = [(0, seq, seq * S // 100 + 2_000_000, 2000) for seq in range(95)]
    # 95..97 never arrive; 98 and 99 come after the outage, 300 ms late, 99 before 98
    log += [(0, 99, 1_300_000_000, 310_000), (0, 98, 1_301_000_000, 321_000)]
    # the rest once the link is back, 3 ms each
    log += [(0, seq, 1_302_000_000 + (seq - 100) * S // 100, 3000) for seq in range(100, 200)]
    # 150 delivered twice (a redelivery after the cut)
    log.append((0, 150, 1_600_000_000, 100_000))
    before, cut = outage_rows([1.0], [(100.0, 0.0)], [200], [log], t0)
    assert before == {"cut": None, "lost": 0, "duplicated": 0, "reordered": 0, "delayed": 0,
                      "latency_max_us": 2000, "gap_s": 0.01, "delayed_after_us": 2000}
    assert (cut["cut"], cut["lost"], cut["duplicated"], cut["reordered"]) == (1.0, 3, 1, 1)
    # 98 and 99, late; 100 onwards at 3 ms, above the baseline's 2 ms
    assert cut["delayed"] == 2 + 100 and cut["latency_max_us"] == 321_000
    # from the cut to 99's arrival
    assert cut["gap_s"] == 0.3


def test_a_failover_run_that_cannot_be_counted_exactly_is_refused():
    for options, said in (({}, "constant --rate"), ({"rate": 10, "receipts": True}, "without receipts"),
                          ({"rate": 10, "destinations": ("/topic/a",)}, "one queue"),
                          ({"rate": 10, "consumers": 0}, "needs consumers"),
                          ({"rate": 10, "duration": 2.0, "link_cuts": (2.0,)}, "before the end")):
        with pytest.raises(ConfigurationError, match=said):
            LoadConfig(**{"link_cuts": (1.0,), **options}).validate()


def assert_outages_add_up(result: LoadResult, cuts: int) -> None:
    """The outages' counts are the run's own: each lost message a missing one, each extra delivery a duplicate."""
    rows = result.outages
    assert len(rows) == cuts + 1 and rows[0]["cut"] is None
    assert sum(row["lost"] for row in rows) == result.counts["missing"]
    assert sum(row["duplicated"] for row in rows) == result.counts["duplicates"]
    assert all(row["cut"] is not None and row["gap_s"] > 0 for row in rows[1:])
    # the clients came back after each cut, and delivered again
    assert result.client_stats["reconnects"] >= 2 * cuts
    assert result.counts["received"] > 0 and not result.errors


@pytest.mark.anyio
async def test_a_failover_run_counts_its_outages_exactly():
    result = await run_load(LoadConfig(rate=1000, duration=2.0, link_cuts=(0.7, 1.4), ack="client-individual",
                                       drain_timeout=1.0))
    assert_outages_add_up(result, 2)
    assert result.to_dict()["outages"] == result.outages


@pytest.mark.anyio
async def test_a_cut_command_runs_at_each_cut_and_the_run_waits_for_it():
    # No proxy: the command is the outage. It outlasts the drain timeout, and the run still waits
    started = time.monotonic()
    result = await run_load(LoadConfig(rate=200, duration=1.2, link_cuts=(0.4,), cut_command="sleep 1.5; echo done",
                                       drain_timeout=0.3))
    assert result.ok, result.problems
    (before, cut) = result.outages
    assert "command" not in before
    run = cut["command"]
    assert run["returncode"] == 0 and run["seconds"] >= 1.5 and run["output"] == "done\n"
    assert run["at"] == cut["cut"] and time.monotonic() - started >= 0.4 + 1.5
    # nothing was cut: the clients never reconnected
    assert result.client_stats["reconnects"] == 0


@pytest.mark.anyio
async def test_a_stopped_run_still_waits_for_its_cut_command():
    # Ctrl-C (the library's stop) during a broker restart: the restart is not left half done
    import anyio

    stop = anyio.Event()
    started = time.monotonic()

    async def press_ctrl_c() -> None:
        await anyio.sleep(0.7)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(press_ctrl_c)
        result = await run_load(LoadConfig(rate=200, duration=3.0, link_cuts=(0.4,), cut_command="sleep 1.5; echo done",
                                           drain_timeout=0.3), stop=stop)
    assert result.interrupted == "stopped"
    run = result.outages[1]["command"]
    assert run["returncode"] == 0 and run["output"] == "done\n"
    assert time.monotonic() - started >= 0.4 + 1.5


@pytest.mark.anyio
async def test_a_cut_command_that_fails_is_an_error_of_the_run():
    failing = "echo no broker >&2; exit 3"
    result = await run_load(LoadConfig(rate=200, duration=0.6, link_cuts=(0.2,), cut_command=failing,
                                       drain_timeout=0.3))
    assert not result.ok and result.outages[1]["command"]["returncode"] == 3
    assert any("exited 3" in p and "no broker" in p for p in result.problems)
    assert any("exited 3" in e for e in result.errors)


def test_a_cut_command_needs_cuts():
    with pytest.raises(ConfigurationError, match="give --cut-links"):
        LoadConfig(rate=10, cut_command="true").validate()
    with pytest.raises(ConfigurationError, match="shell command"):
        LoadConfig(rate=10, link_cuts=(1.0,), cut_command=" ").validate()


def test_bench_cut_links():
    run = bench("--rate", "500", "--duration", "1.5", "--cut-links", "0.5s", "--drain-timeout", "1", "-q", "--json")
    assert run.returncode in (0, 1), run.stderr
    document = json.loads(run.stdout)
    assert document["config"]["link_cuts"] == [0.5] and len(document["outages"]) == 2
    run = bench("--rate", "200", "--duration", "1", "--cut-links", "0.4s", "--cut-command", "true", "-q", "--json")
    document = json.loads(run.stdout)
    assert document["config"]["cut_command"] == "true" and document["outages"][1]["command"]["returncode"] == 0
    refused = bench("--cut-links", "1s", "-q")
    assert refused.returncode == 2 and b"constant --rate" in refused.stderr


def test_the_new_options_work_across_worker_processes():
    # Two spawned workers: a shape, a size mix, a consumer pause and a link cut, merged exactly
    from stompfast import loadgen
    from stompfast.loadgen import Stage

    result = loadgen.run(LoadConfig(
        rate_shape=(Stage(400, 400, 1.0), Stage(400, 800, 1.0)), producers=2, consumers=2, processes=2,
        sizes=((10, 50, 1.0),), consumer_pauses=((0.5, 0.3),), drain_timeout=1.0,
    ))
    assert result.ok, result.problems
    assert result.counts["sent"] == result.counts["received"] == 400 + 600
    assert [row["stage"] for row in result.stages] == ["400:1s", "400..800:1s"] and len(result.backlog) == 1
    cut = loadgen.run(LoadConfig(rate=500, duration=1.5, link_cuts=(0.7,), producers=2, consumers=2, processes=2,
                                 ack="client-individual", drain_timeout=1.0))
    assert_outages_add_up(cut, 1)
