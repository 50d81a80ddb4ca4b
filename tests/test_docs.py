"""The docs stay true: the tests and files they name exist, their code blocks run, the README's links work on PyPI."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


# --- The code blocks of the README and docs/ run (CONTRIBUTING.md, "Code blocks in the docs") ---
#
# Every ```python block runs, as a program of its own in a fresh interpreter, against an
# in-process test broker started for it (127.0.0.1:61613 and localhost:61613 in the block
# become that broker's address). The nearest non-blank line before the fence may change that:
#   <!-- run-with: async-client -->  or  <!-- run-with: sync-client -->
#       a fragment: it runs inside a connected client (`client`), a client-individual
#       subscription to /queue/orders (`sub`) and one message received from it, not acked
#       (`message`); `handle`, `process` and `log_failure` stand for the reader's own code.
#   <!-- not-run: why -->
#       not run (a real broker, TLS files, Spark...); the reason is required.
#   <!-- only-on: rabbitmq -->  (a comma-separated list of activemq, artemis, rabbitmq)
#       a program that also runs here, but on those real brokers only
#       (tests/integration/test_docs_brokers.py runs the recipes on each real broker).

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^([ \t]*)```[ \t]*(?:python|py|python3)[ \t]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"^<!--\s*([\w-]+):\s*(.*?)\s*-->$")
_LOCAL_BROKER = re.compile(r"(?:127\.0\.0\.1|localhost):61613\b")
_BLOCK_TIMEOUT = 60
# optional libraries: a block importing one that is not installed is skipped (the suite passes without them)
_OPTIONAL = ("opentelemetry", "prometheus_client")

_STAND_INS = """
def handle(*args, **kwargs):      # the reader's own code
    pass


process = log_failure = handle
"""

_ASYNC_FRAGMENT = """import anyio
from stompfast import AsyncClient
{stand_ins}

async def _example():
    async with AsyncClient({url!r}) as client:
        async with client.subscribe("/queue/orders", ack="client-individual") as sub:
            await client.send("/queue/orders", "an order", receipt=True)
            async for message in sub:
                break
{body}

anyio.run(_example)
"""

_SYNC_FRAGMENT = """from stompfast import Client
{stand_ins}

with Client({url!r}) as client:
    with client.subscribe("/queue/orders", ack="client-individual") as sub:
        client.send("/queue/orders", "an order", receipt=True)
        message = sub.receive(timeout=10)
{body}
"""

_FRAGMENTS = {"async-client": (_ASYNC_FRAGMENT, 12), "sync-client": (_SYNC_FRAGMENT, 8)}
_REAL_BROKERS = {"activemq", "artemis", "rabbitmq"}


def _code_blocks() -> list:
    """(id, kind, argument, code) of every python block: kind is "program", "run-with" or "not-run"."""
    blocks = []
    for path in DOC_FILES:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = [ln.strip() for ln in text[: match.start()].splitlines() if ln.strip()]
            marker = _MARKER.match(before[-1]) if before else None
            kind, argument = marker.groups() if marker else ("program", "")
            blocks.append((f"{path.relative_to(ROOT)}:{line}", kind, argument, textwrap.dedent(match.group(2))))
    return blocks


BLOCKS = _code_blocks()
_RUN = [b for b in BLOCKS if b[1] != "not-run"]


def test_every_code_block_marker_is_known_and_says_why():
    bad = [(where, kind, arg) for where, kind, arg, _ in BLOCKS
           if not (kind == "program" or (kind == "run-with" and arg in _FRAGMENTS) or (kind == "not-run" and arg)
                   or (kind == "only-on" and arg and set(arg.replace(" ", "").split(",")) <= _REAL_BROKERS))]
    assert not bad, bad
    assert len(_RUN) >= 10, f"only {len(_RUN)} blocks run"


@pytest.mark.timeout(_BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize("kind,argument,code", [b[1:] for b in _RUN], ids=[b[0] for b in _RUN])
def test_the_code_block_runs(kind: str, argument: str, code: str, tmp_path: Path) -> None:
    import stompfast
    from stompfast.testing import Broker

    for module in _OPTIONAL:  # a block of an optional extra that is not installed here
        if re.search(rf"^\s*(?:from|import)\s+{module}\b", code, re.M) and importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (an optional extra)")

    with Broker.in_thread() as broker:
        address = broker.url.split("//", 1)[1].rstrip("/")
        code = _LOCAL_BROKER.sub(address, code)
        if kind == "run-with":
            template, indent = _FRAGMENTS[argument]
            code = template.format(url=broker.url, stand_ins=_STAND_INS, body=textwrap.indent(code, " " * indent))
        script = tmp_path / "example.py"
        script.write_text(code)
        # the stompfast this test imported (the checkout, or the installed package of a pure build)
        env = {k: v for k, v in os.environ.items() if k != "STOMPFAST_URL"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(stompfast.__file__).parents[1]),
                                                          env.get("PYTHONPATH")]))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=_BLOCK_TIMEOUT)
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"



# A block whose ``anyio.run(main)`` line says it also works on trio runs on trio too.
_SAYS_TRIO = re.compile(r'^anyio\.run\(main\)(?=.*#.*backend="trio")', re.M)
_TRIO_RUN = [b for b in _RUN if _SAYS_TRIO.search(b[3])]


@pytest.mark.timeout(_BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize("kind,argument,code", [b[1:] for b in _TRIO_RUN], ids=[b[0] for b in _TRIO_RUN])
def test_the_code_block_that_says_trio_runs_on_trio(kind: str, argument: str, code: str, tmp_path: Path) -> None:
    assert len(_TRIO_RUN) >= 2, "the README's first example and the SIGTERM recipe say trio"
    test_the_code_block_runs(kind, argument, _SAYS_TRIO.sub('anyio.run(main, backend="trio")', code), tmp_path)


def test_the_readme_links_are_absolute():
    """PyPI renders the README without the repository around it: a relative link would be dead there."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links and not [link for link in links if not link.startswith(("https://", "http://", "#"))]


def test_the_architecture_page_names_every_module_of_the_package():
    # docs/architecture.md is the design record code comments cite: a module it does not
    # mention is a module nobody explained
    root = os.path.join(ROOT, "stompfast")
    text = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    missing = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            if f"{name}/" not in text:
                missing.append(name + "/")
        elif name.endswith((".py", ".pyx")) and name not in ("__init__.py", "__main__.py"):
            stem = name.rsplit(".", 1)[0]
            if stem.startswith("_sync_"):
                stem = "_sync_"  # the blocking client's modules are described together
            if stem not in text:
                missing.append(name)
    assert not missing, f"docs/architecture.md does not mention {missing}"


def _package_modules() -> set:
    """Every module of the package as a path under stompfast/ (``cli/send.py``), and every
    subpackage as ``cli/`` (its ``__init__.py`` is described on that line)."""
    root = ROOT / "stompfast"
    names = set()
    for path in root.rglob("*"):
        relative = path.relative_to(root).as_posix()
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(relative + "/")
        elif path.suffix in (".py", ".pyx") and not (path.name == "__init__.py" and path.parent != root):
            names.add(relative)
    return names


def test_the_contributing_layout_names_every_module_of_the_package_once():
    # CONTRIBUTING.md's "Layout" is where a new contributor looks for what each module is for:
    # one line per module, saying its job. A module it leaves out, or one it names that is
    # gone, is a map that lies.
    text = (ROOT / "CONTRIBUTING.md").read_text()
    block = text.split("\n## Layout\n", 1)[1].split("```\n", 2)[1]
    named, package, empty = [], "", []
    for line in block.splitlines():
        match = re.match(r"^( +)(\S+)\s*(.*)$", line)
        if not match or len(match.group(1)) not in (2, 4):
            continue  # stompfast/ itself, tests/, docs/...; a wrapped description
        indent, name, description = match.groups()
        if len(indent) == 2:
            package = name if name.endswith("/") else ""
            path = name
        else:
            assert package, f"{name} is indented under no subpackage"
            path = package + name
        named.append(path)
        if not description:
            empty.append(path)
    modules = _package_modules()
    assert len(modules) > 50, sorted(modules)  # the walk found the package
    missing = sorted(modules - set(named))
    stale = sorted(set(named) - modules)
    twice = sorted({path for path in named if named.count(path) > 1})
    assert not (missing or stale or twice or empty), (
        f"CONTRIBUTING.md's layout: missing {missing}, naming what does not exist {stale}, "
        f"twice {twice}, without a description {empty}"
    )
