"""No module of ``stompfast/`` reaches into another's private names.

A name with a leading underscore (not a dunder) is private to the module or class
that defines it. This test walks every ``.py`` file of the package with :mod:`ast`
and fails, listing ``file:line`` and the offending expression, on

* a private name imported from another module: ``from .x import _name``,
  ``from stompfast.x import _name``, ``from .. import _name`` (also inside a
  function). A public name from a private module (``from ._config import
  parse_url``) is fine, and so are a private *module* of the package
  (``from . import _loadgen``, the same as ``from ._loadgen import name``) and
  aliasing a module (``import x as _x``);
* a private attribute of another object: any ``obj._name`` whose ``obj`` is not
  the bare name ``self`` or ``cls`` (``client._async``, ``self._transport._closed``,
  ``Foo._bar``), except for the few patterns of ``ALLOWED_ATTRIBUTES`` below.

What a module does with its own private names through ``globals()`` is a
subscript, not an attribute, so it is never flagged.

Run as a script to print every remaining violation, grouped by file::

    python tests/test_private_names.py            # the stompfast/ package
    python tests/test_private_names.py path ...   # other files or directories
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterable, NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "stompfast"

# Private-looking attributes that are someone's public API, keyed by pattern (never
# by file). Keep this short: every entry is a hole in the check.
#   (None, name): ``anything.name``;  (base, name): only ``base.name`` with ``base`` a bare name.
ALLOWED_ATTRIBUTES: frozenset[tuple[str | None, str]] = frozenset({
    # namedtuple's public API carries a leading underscore so as not to clash with field names
    (None, "_replace"), (None, "_asdict"), (None, "_fields"), (None, "_make"), (None, "_field_defaults"),
    # documented escape hatches of the standard library
    ("sys", "_getframe"),
    ("os", "_exit"),
    # ReceiptFuture is a concurrent.futures.Future: _sync_receipts.py builds the finished ones without
    # the Future's lock and notify (once per blocking send(receipt=True), the hot path) and keeps the
    # Receipt a future follows off the public class, which must mirror Receipt name for name
    # (tests/test_sync.py). Only through a variable named ``future``, in that one commented block.
    ("future", "_condition"), ("future", "_state"), ("future", "_result"), ("future", "_exception"),
    ("future", "_waiters"), ("future", "_done_callbacks"), ("future", "_receipt"),
})


class Violation(NamedTuple):
    path: str
    line: int
    kind: str  # "import" or "attribute"
    name: str  # the private name
    expr: str  # the offending source text

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: private {self.kind} {self.name}: {self.expr}"


def is_private(name: str) -> bool:
    """A leading underscore, not a dunder, not only underscores (``_`` is a throwaway)."""
    if not name.startswith("_") or not name.strip("_"):
        return False
    return not (name.startswith("__") and name.endswith("__"))


def _allowed_attribute(node: ast.Attribute) -> bool:
    if (None, node.attr) in ALLOWED_ATTRIBUTES:
        return True
    return isinstance(node.value, ast.Name) and (node.value.id, node.attr) in ALLOWED_ATTRIBUTES


def _is_submodule(node: ast.ImportFrom, name: str, module_file: Path | None) -> bool:
    """Whether ``from <node's module> import name`` imports a module (a file or package there)."""
    if module_file is None:
        return False
    if node.level:
        base = module_file.parent
        for _ in range(node.level - 1):
            base = base.parent
    else:
        base = PACKAGE.parent
    base = base.joinpath(*(node.module or "").split(".")) / name
    return base.is_dir() or any(base.with_suffix(ext).is_file() for ext in (".py", ".pyx", ".pyi"))


def check_source(source: str, path: str = "<string>", module_file: Path | None = None) -> list[Violation]:
    """Every private import and foreign private attribute of one module's source.

    ``module_file`` (the file the source is read from) lets relative imports of private
    submodules be told from imports of private names.
    """
    tree = ast.parse(source, filename=path)
    found: list[tuple[tuple[int, int], Violation]] = []  # (source position, violation)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if is_private(alias.name) and not _is_submodule(node, alias.name, module_file):
                    module = "." * node.level + (node.module or "")
                    found.append(((node.lineno, node.col_offset), Violation(
                        path, node.lineno, "import", alias.name, f"from {module} import {alias.name}")))
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if _allowed_attribute(node):
                continue
            found.append(((node.lineno, node.col_offset), Violation(
                path, node.lineno, "attribute", node.attr, ast.unparse(node))))
    found.sort(key=lambda item: item[0])  # (stable: the names of one import keep their order)
    return [v for _, v in found]


def python_files(roots: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        files.extend(sorted(root.rglob("*.py")) if root.is_dir() else [root])
    return files


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(PACKAGE.parent))
    except ValueError:
        return str(path)


def check_file(path: Path) -> list[Violation]:
    return check_source(path.read_text(encoding="utf-8"), _display(path), path)


def report(roots: Iterable[Path] = (PACKAGE,)) -> str:
    """All violations under ``roots``, grouped by file with counts (empty string if none)."""
    lines: list[str] = []
    total = 0
    for path in python_files(roots):
        found = check_file(path)
        if not found:
            continue
        total += len(found)
        names = sorted({v.name for v in found})
        lines.append(f"{_display(path)}: {len(found)} violation(s); names: {', '.join(names)}")
        lines.extend(f"  {v.line}: {v.kind} {v.expr}" for v in found)
    if lines:
        lines.append(f"total: {total} violation(s)")
    return "\n".join(lines)


# --- the checker itself: it must flag a planted snippet and pass a clean one ------------

PLANTED = '''
from .x import _name
from stompfast.y import public, _hidden as h
from .. import _up

def f(client, sub):
    from ._z import _inner
    client._async = 1
    sub._buffer.clear()
    self._transport._closed
    return Foo._bar, other.__secret
'''

CLEAN = '''
from ._config import parse_url
from . import frames
import os as _os
import collections

class Foo:
    __slots__ = ("_a",)

    def __init__(self):
        self._a = 1
        self.__dict__
        _os.path.join("a")

    @classmethod
    def make(cls):
        return cls._build()

    def other(self, point):
        globals()["_helper"]
        sys._getframe(1)
        os._exit(0)
        return point._replace(x=1), point._asdict(), type(point)._fields, Point._make([1])
'''


def test_checker_flags_planted_snippet() -> None:
    found = check_source(PLANTED)
    assert [(v.kind, v.name) for v in found] == [
        ("import", "_name"),
        ("import", "_hidden"),
        ("import", "_up"),
        ("import", "_inner"),
        ("attribute", "_async"),
        ("attribute", "_buffer"),
        ("attribute", "_closed"),
        ("attribute", "_bar"),
        ("attribute", "__secret"),
    ]
    assert found[0].line == 2 and found[0].expr == "from .x import _name"
    assert found[6].expr == "self._transport._closed"
    assert "<string>:8: private attribute _async: client._async" in [str(v) for v in found]


def test_checker_passes_clean_snippet() -> None:
    assert check_source(CLEAN) == []


def test_allowlist_is_keyed_by_base() -> None:
    # sys._getframe is allowed, another object's _getframe is not
    found = check_source("frame._getframe\nos._exit\nproc._exit\n")
    assert [v.expr for v in found] == ["frame._getframe", "proc._exit"]


def test_private_submodule_import_is_not_a_private_name(tmp_path: Path) -> None:
    (tmp_path / "_sub.py").write_text("x = 1\n")
    (tmp_path / "_pkg").mkdir()
    code = "from . import _sub, _pkg, _missing\n"
    mod = tmp_path / "mod.py"
    assert [v.name for v in check_source(code, "mod.py", mod)] == ["_missing"]
    # without the file to resolve against, every private name is flagged
    assert [v.name for v in check_source(code)] == ["_sub", "_pkg", "_missing"]


def test_report_groups_by_file(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(PLANTED)
    (tmp_path / "good.py").write_text(CLEAN)
    text = report([tmp_path])
    assert "bad.py: 9 violation(s)" in text and "good.py" not in text
    assert text.endswith("total: 9 violation(s)")
    assert report([tmp_path / "good.py"]) == ""


# --- the package: one test per module, so the remaining work shows file by file ----------

MODULES = python_files([PACKAGE])


def test_package_found() -> None:
    assert len(MODULES) > 10 and PACKAGE / "_protocol.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_names_across_modules(path: Path) -> None:
    found = check_file(path)
    assert not found, f"{len(found)} private name(s) reached across modules:\n" + "\n".join(map(str, found))


if __name__ == "__main__":
    text = report([Path(arg) for arg in sys.argv[1:]] or [PACKAGE])
    print(text or "no violations")
    sys.exit(1 if text else 0)
