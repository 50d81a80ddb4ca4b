"""What the docs show of the API is the API: signatures, the reference's entries, public names only.

The signatures the guides show are the code's (README.md, docs/client.md, docs/sync.md).

A guide shows a call's signature in backticks, ``AsyncClient(url=None, *, login, ...)`` or
``client.send(destination, body=b"", *, headers=None, ...)``. Each one is checked against
``inspect.signature`` of what it names: every keyword it shows exists, every default it
shows is the code's, and a list without ``...`` names every parameter (so a new option
cannot go undocumented). A call written as an example (``AsyncClient(..., persistent=True)``)
only has its keywords checked. The API reference lists every public name, and no page but
docs/architecture.md (the tour of the internals) names a private module.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest

import stompfast

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/client.md", "docs/sync.md"]
#: a name and its argument list in backticks: `AsyncClient(...)`, `client.send(...)`, `await sub.receive(...)`
CALL = re.compile(r"`(?:await\s+)?((?:[A-Za-z_]\w*\.)?[A-Za-z_]\w*)\(([^`]*?)\)`", re.S)


def _target(sync: bool, name: str) -> Optional[Any]:
    """What ``name`` stands for: a public class or function, or a method of a client or subscription.

    ``client.x`` and ``sub.x`` are the blocking client's in a text about it (``sync``), else the async one's.
    """
    if "." in name:
        owner, method = name.split(".", 1)
        cls = {
            "client": stompfast.Client if sync else stompfast.AsyncClient,
            "sub": stompfast.Subscription if sync else stompfast.AsyncSubscription,
            "Client": stompfast.Client,
            "AsyncClient": stompfast.AsyncClient,
        }.get(owner)
        return getattr(cls, method, None) if cls is not None else None
    value = getattr(stompfast, name, None)
    return value if callable(value) and name in stompfast.__all__ else None


def _items(args: str) -> List[str]:
    """The comma-separated items of an argument list, commas inside brackets and quotes kept."""
    items, depth, quote, current = [], 0, "", ""
    for ch in args:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        items.append(current.strip())
    return items


def _about_the_sync_client(doc: str, text: str, at: int) -> bool:
    """Whether the text at ``at`` is about the blocking client: all of sync.md, the README's section on it."""
    if doc.endswith("sync.md"):
        return True
    headings = re.findall(r"^## (.*)$", text[:at], re.M)
    return bool(headings) and re.search(r"\bsync client", headings[-1]) is not None


def _signature(target: Any) -> inspect.Signature:
    try:
        return inspect.signature(target)
    except ValueError:
        # The compiled scanner's class has no signature: its pure-Python twin takes the same arguments
        from stompfast import _scanner_py

        return inspect.signature(getattr(_scanner_py, target.__name__))


def _shown() -> Iterator[Tuple[str, str, Any, List[str]]]:
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in CALL.finditer(text):
            target = _target(_about_the_sync_client(doc, text, match.start()), match.group(1))
            args = " ".join(match.group(2).split())
            if target is not None and args:
                yield doc, match.group(1), target, _items(args)


SHOWN = list(_shown())


def test_the_guides_show_signatures():
    # the parser finds them: the constructors and the main calls of both clients
    names = {(doc, name) for doc, name, _, _ in SHOWN}
    assert {("docs/client.md", "AsyncClient"), ("docs/sync.md", "Client"), ("README.md", "client.send"),
            ("docs/client.md", "client.subscribe"), ("docs/sync.md", "client.subscribe")} <= names


@pytest.mark.parametrize("doc,name,target,items", SHOWN, ids=[f"{d}:{n}:{i}" for i, (d, n, _, _) in enumerate(SHOWN)])
def test_a_shown_signature_is_the_codes(doc: str, name: str, target: Any, items: List[str]) -> None:
    parameters = {p.name: p for p in _signature(target).parameters.values() if p.name != "self"}
    first = next(iter(parameters), None)
    keywords = [item.split("=", 1)[0].strip() for item in items if item not in ("*", "...")]
    # A signature starts with the first parameter's bare name or holds a bare `*`; anything else is an example call.
    signature = "*" in items or items[0] == first
    named = [k for k in keywords if k.isidentifier()]
    if not signature:
        named = [item.split("=", 1)[0].strip() for item in items if "=" in item]
    unknown = [k for k in named if k not in parameters]
    assert not unknown, f"{doc}: `{name}(...)` shows {unknown}, which {name} does not take"
    if not signature:
        return
    for item in items:
        if "=" not in item:
            continue
        key, shown = (part.strip() for part in item.split("=", 1))
        if not shown:
            continue
        # `ack="auto"|"client"|...`: the first is the default, the others the choices
        shown = shown.split("|", 1)[0]
        try:
            value = ast.literal_eval(shown)
        except (ValueError, SyntaxError):
            continue
        assert parameters[key].default == value, (
            f"{doc}: `{name}(...)` shows {key}={shown}, the code's default is {parameters[key].default!r}"
        )
    if "..." not in items:
        missing = [p for p in parameters if p not in named]
        assert not missing, f"{doc}: `{name}(...)` leaves out {missing} (or end the list with `...`)"


def test_the_api_reference_lists_every_public_name():
    # docs/reference/*.md render `::: stompfast.Name` entries; the errors page renders the whole module
    listed = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        listed.update(re.findall(r"^::: stompfast\.(\w+)\s*$", page.read_text(), re.M))
    import stompfast.errors

    errors = set(stompfast.errors.__all__)
    missing = sorted(name for name in stompfast.__all__ if name not in listed and name not in errors)
    assert not missing, f"public names the API reference leaves out: {missing}"


def test_the_guides_name_no_private_module():
    pages = [ROOT / "README.md"] + [p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md"]
    for page in pages:
        found = re.findall(r"stompfast\._\w+|`_[a-z]\w*\.py`", page.read_text())
        assert not found, f"{page.name} names private modules: {found} (name the public API instead)"
