"""A real multi-process cluster (``local-cluster[2,1,1024]``: two executor JVMs, each with its
own Python workers): executors write with the sink and run the distributed load generator;
the counts match what the broker holds and delivered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from .conftest import _real

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_local_cluster_executors_write_and_generate_load(spark: Any) -> None:
    target = _real("rabbitmq")  # one broker is enough here: the cluster, not the broker, is under test
    n, count = 4000, 3000
    queue, prefix = target.queue(), target.queue()
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, os.path.join(here, "cluster_job.py"), target.url, queue, str(n), prefix,
                           str(count)], capture_output=True, text=True, timeout=280, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    seen = json.loads(lines[-1])
    assert seen["executors"] == 2, seen
    # The tasks ran in executor JVMs (the Python workers' parents), not under the driver.
    assert len(seen["executor_jvms"]) == 2 and seen["driver_pid"] not in seen["executor_jvms"], seen
    assert seen["ok"], seen["problems"]
    c = seen["counts"]
    assert c["sent"] == c["confirmed"] == c["received"] == c["distinct"] == count, c
    assert c["missing"] == c["duplicates"] == c["errors"] == 0, c
    assert seen["workers"] == [0, 1]
    assert sorted(int(b) for b in target.drain(queue)) == list(range(n))  # the sink's rows, each once
    for worker in range(2):
        assert target.wait_depth(f"{prefix}-{worker}", 0, timeout=10) in (0, None)
