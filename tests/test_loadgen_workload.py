"""``stompfast bench --workload FILE.toml``: a run described in a file, each key an option.

The translation from a parsed file to options is pure and checked against the bench
parser itself (every option has its key); the installed command runs a file, lets a
later option override it, refuses a bad file with exit 2, and runs the example shipped
in examples/workloads/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import List

import pytest
from test_loadgen import bench

from stompfast.errors import ConfigurationError
from stompfast.loadgen import add_bench_command
from stompfast.loadgen.workload import read_toml, workload_args

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent


def bench_options() -> List[argparse.Action]:
    """The bench command's options, as its --workload action was given them."""
    top = argparse.ArgumentParser(prog="stompfast")
    subparsers = top.add_subparsers()
    add_bench_command(subparsers)
    bench_parser = subparsers.choices["bench"]
    (workload,) = [a for a in bench_parser._actions if a.dest == "workload"]
    return list(workload.options)


def test_a_file_becomes_the_options_it_names_in_order():
    document = {
        "rate": "1000:30s", "producers": 2, "duration": 1.5, "destinations": ["/queue/a", "/queue/b"],
        "headers": {"persistent": "true"}, "receipts": True, "json": False, "nack-share": 0.1,
        "consumer_pause": ["1s:1s"], "body_file": ["a.json"],
    }
    assert workload_args(document, bench_options(), "w.toml") == [
        "--rate", "1000:30s", "--producers", "2", "--duration", "1.5", "--destination", "/queue/a",
        "--destination", "/queue/b", "--header", "persistent:true", "--receipts", "--nack-share", "0.1",
        "--consumer-pause", "1s:1s", "--body-file", "a.json",
    ]
    # false on a switch with a --no- form says so (it overrides an earlier true)
    assert workload_args({"receipts": False}, bench_options(), "w.toml") == ["--no-receipts"]


def test_every_option_of_bench_has_a_key():
    options = bench_options()
    # the parser's own list: none of its options escaped the noting
    top = argparse.ArgumentParser(prog="stompfast")
    subparsers = top.add_subparsers()
    add_bench_command(subparsers)
    listed = {a.dest for a in subparsers.choices["bench"]._actions} - {"help"}
    assert {a.dest for a in options} == listed
    for action in options:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest in ("help", "workload"):
            continue
        value = True if action.nargs == 0 else ["x"] if isinstance(action, argparse._AppendAction) else "x"
        for key in (longs[0][2:], longs[0][2:].replace("-", "_"), action.dest):
            assert workload_args({key: value}, options, "w.toml")[0] == longs[0], key


@pytest.mark.parametrize("document, said", [
    ({"rates": 5}, "unknown key 'rates'"),
    ({"workload": "other.toml"}, "unknown key 'workload'"),
    ({"receipts": "yes"}, "receipts is a switch"),
    ({"rate": [1, 2]}, "rate takes one value, not a list"),
    ({"rate": {"a": 1}}, "rate takes a value, not a table"),
    ({"producers": True}, "a string or a number"),
    ({"slo": [{"p99": 5}]}, "a string or a number"),
])
def test_a_key_that_cannot_be_an_option_is_refused(document, said):
    with pytest.raises(ConfigurationError, match=said):
        workload_args(document, bench_options(), "w.toml")


def test_a_file_that_is_not_toml_is_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("rate = \n")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        read_toml(str(bad))
    with pytest.raises(ConfigurationError, match="cannot read"):
        read_toml(str(tmp_path / "missing.toml"))


def test_bench_runs_a_workload_and_a_later_option_overrides_it(tmp_path):
    workload = tmp_path / "run.toml"
    workload.write_text('count = 400\nproducers = 2\nslo = ["missing==0"]\nsize = "10..20"\n')
    run = bench("--workload", str(workload), "-q", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["counts"]["received"] == 400 and document["config"]["producers"] == 2
    assert document["config"]["sizes"] == "10..20" and document["slo_met"] is True
    override = bench("--workload", str(workload), "--producers", "1", "--slo", "duplicates==0", "-q", "--json")
    assert override.returncode == 0, override.stderr
    again = json.loads(override.stdout)
    assert again["config"]["producers"] == 1 and again["config"]["slo"] == ["missing==0", "duplicates==0"]
    workload.write_text("rates = 5\n")
    refused = bench("--workload", str(workload), "-q")
    assert refused.returncode == 2 and b"unknown key 'rates'" in refused.stderr


def test_the_shipped_example_workload_runs_and_meets_its_objectives():
    # Its own shape at a tenth of the rate and length: the file's keys all in play, a light load
    run = bench("--workload", str(ROOT / "examples" / "workloads" / "step-test.toml"),
                "--rate", "100:0.5s,100..300:0.5s,300:0.5s", "--warmup", "0", "-q", "--json")
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["ok"] and document["slo_met"] and len(document["stages"]) == 3
