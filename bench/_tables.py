"""One way to print a result table for the bench scripts: aligned text, or Markdown."""

from __future__ import annotations

from typing import Sequence


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> None:
    """Print ``rows`` under ``head``; in text form the last column is left unpadded."""
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in rows:
            print("| " + " | ".join(str(c) for c in row) + " |")
        return
    table = [list(head)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
