"""``python -m stompfast``: the ``stompfast`` command (see :mod:`stompfast.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m stompfast"))
