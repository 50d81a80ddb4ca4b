"""``stompfast bench --slo``: objectives parsed and refused before any I/O, judged on the merged result, exit 3.

The parser and the judgement are pure (``stompfast.loadgen.slo``); a run on the
in-process broker checks the judgement against a real result (its HDR histogram),
the installed command checks the exit codes and the JSON, and ``--processes 2`` that
the objectives are judged once, on the merged result.
"""

from __future__ import annotations

import json
import math

import pytest
from test_loadgen import bench

from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, run_load
from stompfast.loadgen.slo import judge, parse_objectives
from stompfast.testing import Broker

pytestmark = pytest.mark.timeout(120)


def test_objectives_parse_with_units_targets_and_spaces():
    (p99, missing, rate, send), = [parse_objectives(["p99 < 5ms, missing==0", "rate>=0.98*target,send_rate>2000/s"])]
    assert (p99.metric, p99.op, p99.threshold, p99.kind) == ("p99", "<", 5000.0, "latency")
    assert p99.text == "p99<5ms"
    assert (missing.metric, missing.op, missing.threshold, missing.kind) == ("missing", "==", 0.0, "count")
    assert (rate.factor, rate.threshold, rate.kind) == (0.98, None, "rate")
    assert send.threshold == 2000.0
    # the default unit is ms; us and s are there too; any percentile
    assert [o.threshold for o in parse_objectives(["p99.9<2", "max<=250us", "mean<1s"])] == [2000.0, 250.0, 1e6]
    assert parse_objectives(["rate>=target"])[0].factor == 1.0


@pytest.mark.parametrize("bad, said", [
    ("p99", "not METRIC OP VALUE"),
    ("p99<<5ms", "a latency"),
    ("latency<5ms", "unknown metric 'latency'"),
    ("p0<5ms", "above 0 and at most 100"),
    ("p101<5ms", "above 0 and at most 100"),
    ("p99<5 minutes", "not METRIC OP VALUE"),
    ("p99<5min", "a latency"),
    ("missing<0.5", "a whole number"),
    ("rate>=fast", "a number or F*target"),
    ("p99<5ms,,missing==0", "an empty objective"),
])
def test_a_bad_objective_is_refused_with_what_is_wrong(bad: str, said: str):
    with pytest.raises(ConfigurationError, match=said.replace("*", r"\*").replace("(", r"\(")):
        parse_objectives([bad])


@pytest.mark.parametrize("objective, config, said", [
    ("rate>=0.9*target", LoadConfig(), "this run has none"),
    ("p99<5ms", LoadConfig(consumers=0), "without consumers"),
    ("receive_rate>1", LoadConfig(consumers=0), "without consumers"),
    ("confirmed==1000", LoadConfig(), "--receipts"),
])
def test_an_objective_the_run_cannot_measure_is_refused_by_the_config(objective: str, config: LoadConfig, said: str):
    config.slo = (objective,)
    with pytest.raises(ConfigurationError, match=said):
        config.validate()
    config.slo = "p99<5ms"  # type: ignore[assignment]  # a str, not a sequence of them
    with pytest.raises(ConfigurationError, match="sequence of str"):
        config.validate()


@pytest.mark.anyio
async def test_objectives_are_judged_on_a_real_result_from_its_histogram():
    async with Broker() as broker:
        result = await run_load(LoadConfig(
            url=broker.url, count=500, rate=1000, heart_beat=(0, 0),
            slo=("p99<60s", "p99.5<1us", "missing==0", "duplicates>0", "rate>=0.5*target", "max>0us"),
        ))
    assert result.ok, result.problems
    verdicts = {j.objective.text: j for j in result.slo}
    assert [j.objective.text for j in result.slo] == ["p99<60s", "p99.5<1us", "missing==0", "duplicates>0",
                                                     "rate>=0.5*target", "max>0us"]
    assert verdicts["p99<60s"].ok and not verdicts["p99.5<1us"].ok
    # p99.5 is no named percentile of latency_us: it comes from the histogram itself
    assert verdicts["p99.5<1us"].value == float(result.histogram.get_value_at_percentile(99.5))
    assert verdicts["missing==0"].ok and not verdicts["duplicates>0"].ok
    assert verdicts["rate>=0.5*target"].limit == 500.0 and verdicts["rate>=0.5*target"].ok
    assert result.slo_met is False
    document = result.to_dict()
    assert document["slo_met"] is False and len(document["slo"]) == 6
    assert document["slo"][1] == {
        "objective": "p99.5<1us", "metric": "p99.5", "op": "<", "kind": "latency", "threshold": 1.0,
        "value": verdicts["p99.5<1us"].value, "ok": False,
    }
    # Read back without its histogram, a result judges the named percentiles from latency_us
    result.histogram = None
    (p99,) = judge(parse_objectives(["p99<60s"]), result)
    assert p99.ok and p99.value == result.latency_us["p99"]
    (unknown,) = judge(parse_objectives(["p99.5<60s"]), result)
    assert unknown.value is None and not unknown.ok and "not measured" in unknown.describe()


def test_a_judgement_says_what_it_measured_and_a_target_without_a_rate_is_never_met():
    from stompfast.loadgen.slo import Judgement, Objective

    objective = Objective("rate>=1", "rate", ">=", 1.0)
    assert Judgement(objective, 1.0, None, False).describe() == "rate>=1: not measured in this run (missed)"
    assert Judgement(objective, 1.0, 5.0, True).describe() == "rate>=1: 5.0 msgs/s (met)"
    assert math.isnan(judge([parse_objectives(["rate>=target"])[0]], _no_rate_result())[0].limit)


def _no_rate_result():
    class Result:
        config = LoadConfig()
        rates = {"receive_msgs_per_s": 10.0}
        counts: dict = {}
        histogram = None
        latency_us = None

    return Result()


def run(*args: str, timeout: float = 90) -> tuple:
    """``stompfast bench ARGS`` as installed: exit code, stdout, stderr."""
    done = bench(*args, timeout=timeout)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_the_command_exits_3_when_a_clean_run_misses_an_objective_and_names_it():
    code, out, err = run("--count", "300", "--slo", "p50<1us,missing==0", "--slo", "rate>=1", "--json", "-q")
    assert code == 3, err
    document = json.loads(out)
    assert document["ok"] is True and document["slo_met"] is False
    assert [o["ok"] for o in document["slo"]] == [False, True, True]
    assert document["config"]["slo"] == ["p50<1us,missing==0", "rate>=1"]
    assert "SLO MISSED: p50<1us:" in err and "missing==0" not in err.split("SLO MISSED")[1]


def test_the_command_exits_0_with_every_objective_met_and_2_for_a_bad_one():
    code, out, err = run("--count", "300", "--slo", "p99<60s,missing==0,errors==0")
    assert code == 0, err
    assert "3 objectives met" in err and "objectives (--slo)" in out
    code, out, err = run("--count", "300", "--slo", "p99<5 ms")
    assert code == 2 and "not METRIC OP VALUE" in err and out == ""


def test_objectives_are_judged_once_on_the_result_merged_over_processes():
    code, out, err = run("--count", "600", "--processes", "2", "-p", "2", "-c", "2", "--slo", "received==600,p99<60s",
                         "--json", "-q", timeout=120)
    assert code == 0, err
    document = json.loads(out)
    assert [(o["objective"], o["value"], o["ok"]) for o in document["slo"]][0] == ("received==600", 600.0, True)
