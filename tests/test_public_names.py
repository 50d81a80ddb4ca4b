"""Public names show as the name users import: ``stompfast.AsyncClient``, not ``stompfast._client.AsyncClient``.

Each package sets ``__module__`` of the classes and functions its ``__all__`` takes from
its private modules (stompfast/__init__.py; the lazy ``testing`` and ``spark`` in the
defining modules). So reprs, help() and pickles name the package, and a pickle does not
depend on which private module holds a class today. The names of public modules
(``stompfast.errors``, ``stompfast.frames``, ``stompfast.loadgen.config``...) keep theirs,
and so does the scanner pair: its module says which implementation was loaded.
"""

from __future__ import annotations

import importlib
import pickle
import re
import subprocess
import sys
import types
from typing import Any, List, Tuple

import pytest

PACKAGES = ["stompfast", "stompfast.cli", "stompfast.loadgen", "stompfast.testing", "stompfast.otel", "stompfast.spark"]
#: names whose module says which scanner was loaded (the Cython type's __module__ cannot be set)
SCANNER_PAIR = {"FrameScanner", "encode_frame"}
#: a private module of the package, as a pickle names it
PRIVATE_MODULE = re.compile(rb"stompfast[\w.]*\._")


def _package(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # stompfast.otel and stompfast.spark need their extras
        pytest.skip(f"{name} needs an optional extra: {exc}")


def _public(package: types.ModuleType) -> List[Tuple[str, Any]]:
    """The classes and functions of ``package.__all__`` (constants are left out)."""
    out = []
    for name in package.__all__:
        obj = getattr(package, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__")):
            out.append((name, obj))
    return out


def _is_public_module(module: str, package: str) -> bool:
    """``module`` is ``package`` or one of its modules without a private part (``stompfast.errors``)."""
    if module == package:
        return True
    rest = module[len(package) + 1:] if module.startswith(package + ".") else None
    return rest is not None and not any(part.startswith("_") for part in rest.split("."))


@pytest.mark.parametrize("package_name", PACKAGES)
def test_every_public_name_shows_its_public_module(package_name: str) -> None:
    package = _package(package_name)
    public = _public(package)
    assert public, f"{package_name}.__all__ has no class or function"
    wrong = []
    for name, obj in public:
        if package_name == "stompfast" and name in SCANNER_PAIR:
            from stompfast._scanner import IMPLEMENTATION

            expected = "stompfast._scanner_c" if IMPLEMENTATION == "c" else "stompfast._scanner_py"
            if obj.__module__ != expected:
                wrong.append(f"{name}: {obj.__module__} (expected {expected})")
            continue
        if not _is_public_module(obj.__module__, package_name):
            wrong.append(f"{name}: {obj.__module__}")
    assert not wrong, f"public names of {package_name} shown by a private module: {wrong}"


@pytest.mark.parametrize("package_name", PACKAGES)
def test_the_shown_name_finds_the_same_object(package_name: str) -> None:
    # what pickle does: import obj.__module__, look up obj.__qualname__ there
    package = _package(package_name)
    for name, obj in _public(package):
        assert obj.__qualname__ == name, f"{package_name}.{name} is called {obj.__qualname__}"
        assert getattr(importlib.import_module(obj.__module__), obj.__qualname__) is obj, name
        assert pickle.loads(pickle.dumps(obj)) is obj, name


def test_reprs_show_stompfast_dot_name() -> None:
    import stompfast
    import stompfast.testing

    assert repr(stompfast.AsyncClient) == "<class 'stompfast.AsyncClient'>"
    assert repr(stompfast.Client) == "<class 'stompfast.Client'>"
    assert repr(stompfast.ReconnectPolicy) == "<class 'stompfast.ReconnectPolicy'>"
    assert repr(stompfast.ConnectError) == "<class 'stompfast.errors.ConnectError'>"  # a public module
    assert repr(stompfast.testing.Broker) == "<class 'stompfast.testing.Broker'>"
    for name, obj in _public(stompfast):
        if name not in SCANNER_PAIR and isinstance(obj, type) and obj.__module__ == "stompfast":
            assert repr(obj) == f"<class 'stompfast.{name}'>"


def test_a_private_module_imported_directly_shows_the_public_name_too() -> None:
    # stompfast.testing and stompfast.spark import their modules on first use, so the name is
    # set where the class is defined: importing that module any way gives the same answer
    code = (
        "from stompfast.testing._faults import Trigger\n"
        "from stompfast.testing._broker import Broker, BrokerStats\n"
        "from stompfast.testing._proxy import FaultProxy, ProxyStats\n"
        "from stompfast._client import AsyncClient\n"
        "for cls in (Trigger, Broker, BrokerStats, FaultProxy, ProxyStats):\n"
        "    assert cls.__module__ == 'stompfast.testing', cls\n"
        "assert AsyncClient.__module__ == 'stompfast', AsyncClient\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _public_exceptions() -> List[type]:
    found = []
    for package_name in PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except ImportError:
            continue
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj not in found:
                found.append(obj)
    return found


@pytest.mark.parametrize("cls", _public_exceptions(), ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
@pytest.mark.parametrize("protocol", [0, pickle.HIGHEST_PROTOCOL])
def test_public_exceptions_round_trip_through_pickle(cls: type, protocol: int) -> None:
    from stompfast.errors import ProtocolError, StompError

    if cls is ProtocolError:
        pytest.skip("abstract: never raised itself")
    exc = cls("went wrong", code=7) if issubclass(cls, StompError) else cls("went wrong")
    data = pickle.dumps(exc, protocol)
    assert not PRIVATE_MODULE.search(data)  # named by its public module
    again = pickle.loads(data)
    assert type(again) is cls and str(again) == str(exc) and again.args == exc.args
    assert vars(again) == vars(exc)


def _public_values() -> List[Any]:
    import stompfast
    from stompfast.testing import BrokerStats, ProxyStats, Trigger

    return [
        stompfast.Endpoint("broker.example", 61613, login="guest", passcode="secret", virtual_host="vhost"),
        stompfast.ReconnectPolicy(max_attempts=3, initial_delay=0.5),
        stompfast.ConnectionEvent("connected", "stomp://broker.example:61613/", attempt=2, reconnected=True),
        stompfast.ClientStats(),
        stompfast.RttSummary(),
        stompfast.Frame("SEND", {"destination": "/queue/a"}, b"hi"),
        Trigger(bytes=10),
        BrokerStats(frames_in={"SEND": 1}),
        ProxyStats(connections=2),
    ]


def _state(obj: Any) -> Any:
    if hasattr(obj, "__slots__") and not hasattr(obj, "__dict__"):
        return {name: getattr(obj, name) for name in obj.__slots__ if hasattr(obj, name)}
    return obj  # dataclasses and tuples compare by value


@pytest.mark.parametrize("value", _public_values(), ids=lambda value: type(value).__qualname__)
def test_public_values_round_trip_through_pickle(value: Any) -> None:
    # the values that cross processes: endpoints and policies in a load generator's config,
    # stats snapshots, frames inside errors
    data = pickle.dumps(value)
    assert not PRIVATE_MODULE.search(data)  # named by the public name, not a private module's
    again = pickle.loads(data)
    assert type(again) is type(value) and _state(again) == _state(value)
