"""The docs name tests that exist: a claim in docs/guarantees.md points at the test that keeps it true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _defined_tests() -> set:
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.update(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_test_named_in_the_guarantees_exists():
    text = (ROOT / "docs" / "guarantees.md").read_text()
    named = {n.rstrip("*") for n in re.findall(r"\b(test_\w+\*?)(?=`|,|\)|\s)", text)}
    modules = {path.stem for path in (ROOT / "tests").rglob("test_*.py")}
    named -= modules  # a module named, not a function
    missing = sorted(n for n in named if not any(d.startswith(n) for d in _defined_tests()))
    assert len(named) > 20 and not missing, missing


def test_every_file_named_in_the_guarantees_exists():
    text = (ROOT / "docs" / "guarantees.md").read_text() + (ROOT / "SECURITY.md").read_text()
    paths = set(re.findall(r"`((?:tests|bench|fuzz|docs)/[\w/.]+\.(?:py|md))", text))
    assert paths and not sorted(p for p in paths if not (ROOT / p).exists())
