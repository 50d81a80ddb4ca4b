"""examples/spark_job.py runs: the sink writes, the source reads back with AvailableNow, each row once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = [pytest.mark.timeout(300)]


def test_the_spark_example_job_runs() -> None:
    env = {k: v for k, v in os.environ.items() if k != "STOMPFAST_URL"}
    done = subprocess.run([sys.executable, str(EXAMPLES / "spark_job.py"), "150"], capture_output=True, text=True,
                          env=env, timeout=280, cwd=EXAMPLES.parent)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "spark job: wrote 150 rows, read 150 back, each once" in done.stdout, done.stdout + done.stderr[-3000:]
