"""``stompfast bench --rate`` shapes (steps and ramps), ``--find-max-rate`` and ``--size`` distributions.

The shape parser, the schedule and the search's next-rate rule are pure
(``stompfast.loadgen.shape``, ``stompfast.loadgen.search``). Runs on the in-process
broker check that a shaped run sends exactly what its shape schedules, each message
stamped at its scheduled time, and reports each stage; a search whose criterion is a
count (deterministic, unlike latency) checks the driver; the installed command checks
the flags, the JSON and the exit codes.
"""

from __future__ import annotations

import json
from typing import List

import pytest
from test_loadgen import assert_exact, bench

from stompfast import AsyncClient
from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, run_load
from stompfast.loadgen.bodies import CYCLE_LENGTH, body_cycle, mean_size, parse_sizes
from stompfast.loadgen.config import H_TS
from stompfast.loadgen.search import DEFAULT_CRITERION, MAX_HALVINGS, RateSearch, find_max_rate
from stompfast.loadgen.shape import NEVER, RateSchedule, Stage, parse_duration, parse_rate, stage_rows
from stompfast.testing import Broker

pytestmark = pytest.mark.timeout(120)


# -- the shape ------------------------------------------------------------------------------------


def test_rates_parse_as_a_constant_steps_and_ramps():
    assert parse_rate("5000") == (5000.0, ())
    assert parse_rate("1000:30s, 5000:2m") == (None, (Stage(1000, 1000, 30), Stage(5000, 5000, 120)))
    assert parse_rate("0..5000:500ms,0:1h") == (None, (Stage(0, 5000, 0.5), Stage(0, 0, 3600)))
    assert [parse_duration(text) for text in ("2", "2.5s", "250ms", "1m", "1e1s")] == [2, 2.5, 0.25, 60, 10]


@pytest.mark.parametrize("bad, said", [
    ("0", "above 0"),
    ("-5", "non-negative"),
    ("fast", "not a rate"),
    ("1000:30s,2000", "needs its length"),
    ("1000:soon", "not a duration"),
    ("1000:0s", "more than 0 s"),
    ("0:10s,0..0:5s", "schedules no message"),
    ("1000..x:10s", "not a rate"),
])
def test_a_bad_rate_is_refused_with_what_is_wrong(bad: str, said: str):
    with pytest.raises(ConfigurationError, match=said):
        parse_rate(bad)


def test_the_schedule_spreads_each_stage_as_its_rate_says():
    _, shape = parse_rate("1000:2s,0..2000:2s,0:1s,500:2s")
    schedule = RateSchedule(shape, 0.5)
    # half of 2,000 + 2,000 + 0 + 1,000
    assert schedule.total == 2500 and schedule.end_ns == 7_000_000_000
    assert schedule.time_of(0) == 0 and schedule.time_of(999) == 1_998_000_000
    # the ramp's first message at its start; half its messages in the last 29% of it (sqrt(1/2))
    assert schedule.time_of(1000) == 2_000_000_000
    assert schedule.time_of(1500) == pytest.approx(2e9 + 2e9 * 2 ** -0.5, abs=2)
    # the pause sends nothing: the next message is the last stage's first
    assert schedule.time_of(2000) == 5_000_000_000
    assert schedule.time_of(2500) == NEVER
    for k in (0, 10, 999.5, 1234, 1999, 2000, 2499):
        assert schedule.due_by(schedule.time_of(k)) == pytest.approx(k, abs=1e-3)
    assert [schedule.rate_at(t) for t in (0.5, 3.0, 4.5, 6.0, 7.0)] == [500, 500, 0, 250, 0]


def test_stage_rows_take_the_intervals_that_start_within_each_stage():
    shape = (Stage(100, 100, 2), Stage(300, 300, 1))
    timeline = [{"t": float(t), "seconds": 1.0, "sent": s, "received": r}
                for t, s, r in ((0, 100, 90), (1, 100, 110), (2, 280, 260))]
    first, second = stage_rows(shape, timeline, [None, None, None])
    assert first == {"stage": "100:2s", "t": 0.0, "seconds": 2, "target_rate": 100.0, "send_rate": 100.0,
                     "receive_rate": 100.0, "latency_us": None}
    assert (second["stage"], second["target_rate"], second["send_rate"], second["receive_rate"]) == (
        "300:1s", 300.0, 280.0, 260.0)


def test_a_shape_is_checked_with_the_rest_of_the_config():
    config = LoadConfig(rate_shape=(Stage(100, 200, 3),))
    config.validate()
    assert config.open_loop and config.target_rate == 150 and config.limits() == (None, 3)
    assert LoadConfig(rate_shape=(Stage(100, 200, 3),), duration=1.0).limits() == (None, 1.0)
    with pytest.raises(ConfigurationError, match="not both"):
        LoadConfig(rate=10, rate_shape=(Stage(1, 1, 1),)).validate()
    with pytest.raises(ConfigurationError, match="Stage objects"):
        LoadConfig(rate_shape=((1, 1, 1),)).validate()  # type: ignore[arg-type]
    # rate>=F*target is F times the shape's mean rate
    judged = LoadConfig(rate_shape=(Stage(100, 300, 2),), slo=("rate>=0.5*target",))
    judged.validate()


# -- a shaped run -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_shaped_run_sends_what_its_shape_schedules_each_at_its_time():
    shape = (Stage(400, 400, 0.5), Stage(0, 800, 0.5), Stage(0, 0, 0.25), Stage(200, 200, 0.5))
    async with Broker() as broker:
        queue = "/queue/lg-shape"
        result = await run_load(LoadConfig(url=broker.url, rate_shape=shape, consumers=0, destinations=(queue,),
                                           heart_beat=(0, 0), interval=0.25))
        stamps: List[int] = []
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            async with client.subscribe(queue) as sub:
                while len(stamps) < result.counts["sent"]:
                    stamps.append(int((await sub.receive()).headers[H_TS]))
    # 200 + 200 + 0 + 100, every one sent, none past the shape
    assert result.ok and result.counts["sent"] == 500, result.problems
    schedule = RateSchedule(shape, 1.0)
    assert [s - stamps[0] for s in stamps] == [schedule.time_of(k) for k in range(500)]
    assert [row["stage"] for row in result.stages] == ["400:0.5s", "0..800:0.5s", "0:0.25s", "200:0.5s"]
    assert [row["target_rate"] for row in result.stages] == [400, 400, 0, 200]
    document = result.to_dict()
    assert document["config"]["rate_shape"] == "400:0.5s,0..800:0.5s,0:0.25s,200:0.5s"
    assert document["loop"] == "open" and document["rates"]["target_msgs_per_s"] == pytest.approx(500 / 1.75)


@pytest.mark.anyio
async def test_a_shaped_run_with_two_producers_and_consumers_counts_exactly():
    result = await run_load(LoadConfig(rate_shape=(Stage(1000, 1000, 0.5), Stage(1000, 3000, 0.5)), producers=2,
                                       consumers=2))
    assert_exact(result, 500 + 1000)


# -- the search -------------------------------------------------------------------------------------


def tried(search: RateSearch, holds_up_to: float) -> List[float]:
    rates = []
    while (rate := search.next_rate()) is not None:
        rates.append(rate)
        search.record(rate, rate <= holds_up_to)
    return rates


def test_the_search_doubles_until_a_rate_fails_then_bisects():
    search = RateSearch(1000, refine=3)
    assert tried(search, 3000) == [1000, 2000, 4000, 3000, 3500, 3250]
    assert (search.best, search.failed) == (3000, 3250)
    # a ceiling is tried once, and ends the doubling if it holds
    assert tried(RateSearch(1000, refine=3, ceiling=5000), 10_000) == [1000, 2000, 4000, 5000]


def test_the_search_halves_when_the_start_fails_and_gives_up_below_one():
    assert tried(RateSearch(1000, refine=1), 300) == [1000, 500, 250, 375]
    never = tried(RateSearch(1000, refine=1), 0)
    assert never == [1000, 500, 250, 125, 62, 31, 15, 7, 3][: MAX_HALVINGS + 1]


def test_the_search_refuses_what_it_cannot_use():
    with pytest.raises(ConfigurationError, match="above 0"):
        RateSearch(0)
    with pytest.raises(ConfigurationError, match="refine"):
        RateSearch(10, refine=-1)


@pytest.mark.anyio
async def test_find_max_rate_runs_each_rate_and_reports_the_highest_that_held():
    # a count criterion is exact where latency is not: a 1 s run at R msgs/s receives R
    seen = []
    async with Broker() as broker:
        report = await find_max_rate(
            LoadConfig(url=broker.url, duration=1.0, heart_beat=(0, 0), slo=("received<=300",)),
            start=100, refine=2, on_attempt=seen.append,
        )
    assert [a.rate for a in report.attempts] == [100, 200, 400, 300, 350]
    assert [a.held for a in report.attempts] == [True, True, False, True, False]
    assert seen == report.attempts
    assert (report.best, report.first_failed) == (300, 350)
    document = report.to_dict()
    assert document["schema"] == "stompfast.loadgen.search/1" and document["max_sustainable_rate"] == 300
    assert document["criterion"] == ["received<=300"] and document["step_seconds"] == 1.0
    assert document["attempts"][2]["missed"] == [report.attempts[2].result.slo[0].describe()]


@pytest.mark.anyio
async def test_find_max_rate_refuses_a_shape_and_a_run_without_consumers():
    with pytest.raises(ConfigurationError, match="plain --rate"):
        await find_max_rate(LoadConfig(rate_shape=(Stage(1, 1, 1),)))
    with pytest.raises(ConfigurationError, match="needs consumers"):
        await find_max_rate(LoadConfig(consumers=0))


# -- the command ------------------------------------------------------------------------------------


def test_bench_runs_a_shape_and_reports_its_stages():
    run = bench("--rate", "200:1s,0..400:1s", "-q", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["counts"]["sent"] == document["counts"]["received"] == 400
    assert [row["stage"] for row in document["stages"]] == ["200:1s", "0..400:1s"]
    table = bench("--rate", "200:1s", "-q")
    assert table.returncode == 0, table.stderr
    assert b"stages: target -> sent / received" in table.stdout and b"200:1s" in table.stdout


def test_bench_refuses_a_bad_shape_as_a_usage_error():
    run = bench("--rate", "1000:30", "--rate", "1000:x", "-q")
    assert run.returncode == 2 and b"not a duration: 'x'" in run.stderr


def test_bench_find_max_rate_prints_each_rate_and_the_highest_that_held():
    run = bench("--find-max-rate", "--rate", "100", "--duration", "0.5", "--search-steps", "1",
                "--slo", "received<=100", "-q")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.decode().splitlines()
    # 0.5 s at R msgs/s sends R/2 messages: 100 and 200 hold, 400 and 300 do not
    assert "a rate holds when the run is clean and meets received<=100" in lines[0]
    assert [line.split()[0] for line in lines[1:-1]] == ["100", "200", "400", "300"]
    assert lines[-1] == "maximum sustainable rate: 200 msgs/s (the next tried, 300 msgs/s, failed)"
    # nothing held: exit 3, as a missed objective
    none = bench("--find-max-rate", "--rate", "2", "--duration", "0.5", "--search-steps", "0",
                 "--slo", "received>1000", "-q", timeout=120)
    assert none.returncode == 3 and b"NO RATE HELD" in none.stderr
    assert DEFAULT_CRITERION == ("p99<100ms", "receive_rate>=0.95*target")


def test_bench_find_max_rate_refuses_what_describes_one_run():
    run = bench("--find-max-rate", "--csv", "out.csv", "-q")
    assert run.returncode == 2 and b"describe one run" in run.stderr
    shaped = bench("--find-max-rate", "--rate", "10:1s", "-q")
    assert shaped.returncode == 2 and b"plain --rate" in shaped.stderr


# -- message sizes ----------------------------------------------------------------------------------


def test_sizes_parse_as_fixed_uniform_and_weighted():
    assert parse_sizes("100") == ((100, 100, 1.0),)
    assert parse_sizes("100..10000") == ((100, 10000, 1.0),)
    assert parse_sizes("100:80%, 10000..20000:20") == ((100, 100, 80.0), (10000, 20000, 20.0))
    assert mean_size(parse_sizes("100:80,10000..20000:20")) == 0.8 * 100 + 0.2 * 15000


@pytest.mark.parametrize("bad, said", [
    ("big", "not a size"),
    ("-1", "not a size"),
    ("20..10", "low <= high"),
    ("1:0,2:0", "weight 0"),
    (str(1 << 30), "low <= high"),
])
def test_a_bad_size_is_refused_with_what_is_wrong(bad: str, said: str):
    with pytest.raises(ConfigurationError, match=said):
        parse_sizes(bad)


def test_a_producers_cycle_is_repeatable_and_follows_the_weights():
    sizes = parse_sizes("100:80,10000..20000:20")
    cycle = body_cycle(sizes, (), 0)
    assert cycle is not None and len(cycle) == CYCLE_LENGTH
    assert cycle == body_cycle(sizes, (), 0) and cycle != body_cycle(sizes, (), 1)
    small = sum(1 for body in cycle if len(body) == 100)
    # 80% of 1,024 draws, within four standard deviations (sqrt(1024 * 0.8 * 0.2) = 12.8)
    assert abs(small - 0.8 * CYCLE_LENGTH) < 52
    assert all(len(body) == 100 or 10000 <= len(body) <= 20000 for body in cycle)
    # one fixed size or one body: no cycle; several bodies: in turn, each producer from another
    assert body_cycle(parse_sizes("100"), (), 0) is None and body_cycle((), (b"a",), 0) is None
    assert body_cycle((), (b"a", b"bb", b"ccc"), 4) == [b"bb", b"ccc", b"a"]


@pytest.mark.anyio
async def test_a_run_sends_each_producers_cycle_of_sizes_in_order():
    sizes = parse_sizes("10..50:3,1000:1")
    async with Broker() as broker:
        queue = "/queue/lg-sizes"
        result = await run_load(LoadConfig(url=broker.url, count=1500, sizes=sizes, consumers=0,
                                           destinations=(queue,), heart_beat=(0, 0)))
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            async with client.subscribe(queue) as sub:
                bodies = [(await sub.receive()).body for _ in range(1500)]
    cycle = body_cycle(sizes, (), 0)
    assert cycle is not None
    assert bodies == [cycle[i % len(cycle)] for i in range(1500)]
    assert result.to_dict()["config"]["sizes"] == "10..50:3,1000:1"
    assert result.config.mean_body_bytes == mean_size(sizes)


def test_a_config_takes_one_of_body_bodies_and_sizes():
    with pytest.raises(ConfigurationError, match="one of body, bodies and sizes"):
        LoadConfig(body=b"x", sizes=((1, 2, 1.0),)).validate()
    with pytest.raises(ConfigurationError, match="bodies must be bytes"):
        LoadConfig(bodies=("text",)).validate()  # type: ignore[arg-type]


def test_bench_takes_a_size_distribution_and_several_body_files(tmp_path):
    run = bench("-n", "300", "--size", "10..30", "-q", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["config"]["sizes"] == "10..30" and document["counts"]["received"] == 300
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_bytes(b"{}")
    second.write_bytes(b'{"k": 1}')
    files = bench("-n", "10", "--body-file", str(first), "--body-file", str(second), "-q", "--json")
    assert files.returncode == 0, files.stderr
    assert json.loads(files.stdout)["config"]["bodies_bytes"] == [2, 8]
    bad = bench("--size", "10..x", "-q")
    assert bad.returncode == 2 and b"not a size" in bad.stderr


# -- many clients, spread starts --------------------------------------------------------------------


def test_a_start_spread_gives_each_producer_a_repeatable_delay():
    from stompfast.loadgen.plan import plan_workers

    def delays(config: LoadConfig, run_id: str) -> List[float]:
        return [ps.start_delay for spec in plan_workers(config, "stomp://x/", ["/queue/a"], run_id)
                for ps in spec.producers]

    config = LoadConfig(producers=50, start_spread=2.0, rate=500)
    first, again, other = delays(config, "run1"), delays(config, "run1"), delays(config, "run2")
    assert first == again != other and all(0 <= d < 2.0 for d in first) and max(first) > 1.0
    assert set(delays(LoadConfig(producers=3), "r")) == {0.0}
    with pytest.raises(ConfigurationError, match="start_spread"):
        LoadConfig(start_spread=-1).validate()


@pytest.mark.anyio
async def test_many_producers_with_spread_starts_count_exactly():
    result = await run_load(LoadConfig(producers=200, rate=400, duration=1.5, start_spread=0.5, heart_beat=(0, 0)))
    # each producer sends from its start to the end: fewer than 1.5 s of its share
    sent = result.counts["sent"]
    assert 400 * 1.0 <= sent < 400 * 1.5
    assert_exact(result, sent)


@pytest.mark.anyio
async def test_a_rate_stopped_early_neither_held_nor_failed():
    from stompfast.loadgen.search import Attempt, SearchResult, describe_attempt

    held_run = await run_load(LoadConfig(rate=200, duration=0.3))
    stopped_run = await run_load(LoadConfig(rate=400, duration=0.3))
    stopped_run.interrupted = "interrupted (Ctrl-C)"
    report = SearchResult(DEFAULT_CRITERION, 0.3, [Attempt(200, True, held_run), Attempt(400, False, stopped_run)])
    assert report.best == 200 and report.first_failed is None
    assert "STOPPED" in describe_attempt(report.attempts[1]) and "missed" not in describe_attempt(report.attempts[1])
