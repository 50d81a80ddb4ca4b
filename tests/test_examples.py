"""Every program in examples/ runs and does what it says (against the in-process broker it starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
pytestmark = [pytest.mark.timeout(120)]

CASES = {  # example (and its arguments) -> a line it must print
    ("producer.py", "300"): "sent 300 orders, all confirmed",
    ("consumer.py",): "handled 200 orders",
    ("async_worker_pool.py",): "500 jobs handled by 8 workers",
    ("transactional_transfer.py",): "moved 50 messages, each in its own transaction",
    ("request_reply.py",): "stomp -> STOMP",
    ("worker_service.py",): "200 jobs done by 8 handlers: 200 acked, 2 retried, 0 dead-lettered; drained cleanly: True",
    ("load_test.py", "5000"): "ok=True sent=5000 received=5000 missing=0",
    ("prometheus_metrics.py",): 'stompfast_messages_received_total{client="example"} 25.0',
}


@pytest.mark.parametrize("argv,expected", list(CASES.items()), ids=[k[0] for k in CASES])
def test_the_example_runs(argv: tuple, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "STOMPFAST_URL"}
    done = subprocess.run([sys.executable, str(EXAMPLES / argv[0]), *argv[1:]], capture_output=True, text=True,
                          env=env, timeout=110, cwd=EXAMPLES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    if done.stdout.startswith("skipped:"):  # an optional library the example needs is not installed
        pytest.skip(f"{argv[0]}: {done.stdout.strip()}")
    assert expected in done.stdout, done.stdout + done.stderr


def test_every_example_is_tested() -> None:
    shown = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert shown <= {argv[0] for argv in CASES} | {"spark_job.py"}  # (tests/spark/test_spark_example.py)
