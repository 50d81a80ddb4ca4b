"""The recipes and the worker example run to completion on RabbitMQ, ActiveMQ Classic and Artemis.

docs/recipes.md promises that each recipe without a note runs, unchanged but for the
URL, on every broker; tests/test_docs.py runs them on the in-process broker, this file
on each real one. Each run gets destinations of its own (``/queue/jobs`` becomes
``/queue/stompfast-test-<id>-jobs``), so a run never sees what an earlier one left, and
the brokers' clean-up finds them. A recipe that needs one broker says so in its
``not-run`` note and is skipped here too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from test_docs import BLOCKS

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90
pytestmark = [pytest.mark.timeout(TIMEOUT + 30)]

_RECIPES = [b for b in BLOCKS if b[0].startswith("docs/recipes.md:") and b[1] in ("program", "only-on")]
# The block's URL, credentials included: the broker's own replace them
_LOCAL_URL = re.compile(r"stomp://(?:[^@\s\"']*@)?(?:127\.0\.0\.1|localhost):61613/?")
_DESTINATION = re.compile(r"""(["'])/(queue|topic|amq/queue)/""")


def run(script: Path, env_url: str = "") -> subprocess.CompletedProcess:
    import stompfast

    env = {k: v for k, v in os.environ.items() if k != "STOMPFAST_URL"}
    if env_url:
        env["STOMPFAST_URL"] = env_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(stompfast.__file__).parents[1]),
                                                      env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          cwd=script.parent, timeout=TIMEOUT)


@pytest.mark.parametrize("where,only,code", [(b[0], b[2], b[3]) for b in _RECIPES], ids=[b[0] for b in _RECIPES])
def test_the_recipe_runs_on_the_broker(
    broker: str, broker_url: str, where: str, only: str, code: str, tmp_path: Path
) -> None:
    assert len(_RECIPES) >= 4, "the recipes page lost its programs"
    if only and broker not in only.replace(" ", "").split(","):
        pytest.skip(f"a recipe for {only} only")
    code = _LOCAL_URL.sub(broker_url, code)
    run_id = uuid.uuid4().hex[:8]
    code = _DESTINATION.sub(lambda m: f"{m.group(1)}/{m.group(2)}/stompfast-test-{run_id}-", code)
    script = tmp_path / "recipe.py"
    script.write_text(textwrap.dedent(code))
    done = run(script)
    assert done.returncode == 0, f"{where}\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def test_the_worker_service_example_finishes_every_job_on_the_broker(broker_url: str, tmp_path: Path) -> None:
    # Its queue is /queue/work: rename it, as for the recipes, so runs do not share it.
    example = ROOT / "examples" / "worker_service.py"
    name = f"/queue/stompfast-test-{uuid.uuid4().hex[:8]}-work"
    script = tmp_path / "worker_service.py"
    script.write_text(example.read_text().replace('"/queue/work"', repr(name)))
    (tmp_path / "_where.py").write_text((ROOT / "examples" / "_where.py").read_text())
    done = run(script, env_url=broker_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "200 jobs done by 8 handlers: 200 acked, 2 retried, 0 dead-lettered; drained cleanly: True" in done.stdout
