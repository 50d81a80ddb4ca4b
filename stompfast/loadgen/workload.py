"""Workload files: a ``stompfast bench`` run described in TOML (``--workload FILE``), reviewed and versioned like code.

Every key is a ``stompfast bench`` option: its long name without the dashes, with ``-``
or ``_`` (``rate``, ``consumer-pause``, ``nack_share``), or the name the option collects
into (``destinations``, ``headers``, ``body_file``, ``consumer_pause``). A value is what
the option takes: a string or a number; ``true`` for a switch (``false`` leaves it off);
a list for an option given several times; a table for ``headers``. The file becomes the
options it names, read where ``--workload`` stands, so options after it on the command
line override the file's (a repeated one adds to the file's list).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Dict, List, Sequence

from ..errors import ConfigurationError

#: The keys a file may not hold: a file names no other file, and help is for people.
_NOT_KEYS = {"workload", "help"}


def read_toml(path: str) -> Dict[str, Any]:
    """The TOML document at ``path`` (ConfigurationError if it cannot be read or parsed)."""
    # tomllib from 3.11 on; before, the same parser as the tomli package
    try:
        tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
    except ImportError:
        raise ConfigurationError(
            "reading a workload file on Python 3.10 needs tomli: pip install tomli (or stompfast[cli])"
        ) from None
    try:
        with open(path, "rb") as f:
            document: Dict[str, Any] = tomllib.load(f)
            return document
    except OSError as exc:
        raise ConfigurationError(f"cannot read the workload file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"the workload file {path} is not valid TOML: {exc}") from None


def workload_args(document: Dict[str, Any], options: Sequence[argparse.Action], path: str) -> List[str]:
    """The command-line options ``document`` (a parsed workload file) stands for, in its order.

    ``options`` are the command's options as they were added (:class:`NotingParser`).
    """
    by_key: Dict[str, argparse.Action] = {}
    for action in options:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest in _NOT_KEYS:
            continue
        for name in (longs[0][2:], action.dest):
            by_key[name] = by_key[name.replace("-", "_")] = by_key[name.replace("_", "-")] = action
    args: List[str] = []
    for key, value in document.items():
        option = by_key.get(key)
        if option is None:
            known = ", ".join(sorted({a.dest for a in by_key.values()}))
            raise ConfigurationError(f"{path}: unknown key {key!r} (the keys are stompfast bench's options: {known})")
        args.extend(_option_args(option, key, value, path))
    return args


def _option_args(action: argparse.Action, key: str, value: Any, path: str) -> List[str]:
    """``value`` of ``key`` as the command line writes it."""
    flag = [o for o in action.option_strings if o.startswith("--")][0]
    if action.nargs == 0:
        # a switch: true is the flag; false its --no- form where it has one, else nothing
        if not isinstance(value, bool):
            raise ConfigurationError(f"{path}: {key} is a switch: true or false, not {value!r}")
        negative = [o for o in action.option_strings if o.startswith("--no-")]
        return [flag] if value else negative[:1]
    if isinstance(value, dict):
        if action.dest != "headers":
            raise ConfigurationError(f"{path}: {key} takes a value, not a table")
        return [part for name, text in value.items() for part in (flag, f"{name}:{_text(text, key, path)}")]
    if isinstance(value, list):
        # an option given several times collects into a list: its default is one
        if not isinstance(action.default, list):
            raise ConfigurationError(f"{path}: {key} takes one value, not a list")
        return [part for item in value for part in (flag, _text(item, key, path))]
    return [flag, _text(value, key, path)]


def _text(value: Any, key: str, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigurationError(f"{path}: {key} takes a string or a number, not {value!r}")
    return str(value)


class NotingParser:
    """A parser or argument group that notes each option added through it: argparse lists them only privately.

    ``add_argument_group`` gives a noting group too; anything else is the wrapped object's.
    """

    def __init__(self, target: Any, noted: List[argparse.Action]) -> None:
        self.target = target
        self.noted = noted

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action: argparse.Action = self.target.add_argument(*args, **kwargs)
        self.noted.append(action)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> "NotingParser":
        return NotingParser(self.target.add_argument_group(*args, **kwargs), self.noted)

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> "NotingParser":
        return NotingParser(self.target.add_mutually_exclusive_group(*args, **kwargs), self.noted)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class WorkloadAction(argparse.Action):
    """``--workload FILE``: the file's options parsed into the namespace where the flag stands.

    ``options``: the command's options (a :class:`NotingParser`'s ``noted``), whose keys the file may use.
    """

    def __init__(self, option_strings: Any, dest: str, options: Sequence[argparse.Action] = (), **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.options = options

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Any = None) -> None:
        path = str(values)
        try:
            args = workload_args(read_toml(path), self.options, path)
        except ConfigurationError as exc:
            parser.error(str(exc))
        setattr(namespace, self.dest, path)
        parser.parse_args(args, namespace)
