"""The public API as a type checker sees it from user code (mypy --strict on tests/typing/).

``public_api.py`` must check clean: ``send`` is overloaded on ``receipt`` (None without
one, a Receipt / ReceiptFuture with one), ``Message.ack()`` is an awaitable on the async
client and returns None on a SyncMessage. ``mistakes.py`` holds what users get wrong;
every line marked ``# error:`` must be reported (a forgotten ``await``, a receipt that
was never asked for, a misspelt option). Runs mypy as user code would, following
imports into the package silently (its own remaining errors are not user code's),
from the source tree's root: a `pip install -e` made with setuptools' import-hook
finder is invisible to mypy (docs/client.md, Typing).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "typing"
pytestmark = [pytest.mark.timeout(300)]

if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed (pip install -e '.[test]')", allow_module_level=True)


def _mypy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
         "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", *args],
        capture_output=True, text=True, timeout=280, cwd=ROOT,
    )


def test_the_public_api_checks_clean_under_strict() -> None:
    done = _mypy(str(HERE / "public_api.py"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_usual_mistakes_are_caught() -> None:
    source = (HERE / "mistakes.py").read_text().splitlines()
    marked = {i + 1 for i, line in enumerate(source) if "# error:" in line}
    done = _mypy("--enable-error-code", "unused-awaitable", str(HERE / "mistakes.py"))
    reported = {int(m.group(1)) for m in re.finditer(r"mistakes\.py:(\d+): error", done.stdout)}
    assert marked and marked <= reported, done.stdout
    assert reported <= marked, done.stdout  # and nothing else
