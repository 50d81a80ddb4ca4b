"""A griffe extension for the docs site: reStructuredText habits of the docstrings, rendered as Markdown.

The docstrings are written for ``help()`` and Sphinx-minded readers: roles such as
:class:`~stompfast.AsyncClient` and a paragraph ending in ``::`` before an indented example.
mkdocstrings renders docstrings as Markdown, where those would show literally, so this
turns a role into a code span (``~`` keeps the last dotted part, as in Sphinx) and
``text::`` into ``text:`` (the indented block after it is already a Markdown code block).
The source docstrings stay as they are. mkdocs.yml loads it (mkdocstrings ``extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|exc|mod|data|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?m)^([ \t]*)(.*?)::[ \t]*$")


def _role(match: re.Match) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _literal(match: re.Match) -> str:
    indent, text = match.groups()
    return f"{indent}{text}:" if text.strip() else ""


def markdown_from_rst(text: str) -> str:
    return _LITERAL.sub(_literal, _ROLE.sub(_role, text))


class RstDocstrings(griffe.Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_from_rst(obj.docstring.value)
