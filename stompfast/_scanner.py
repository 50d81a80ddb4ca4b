"""Picks the frame scanner and encoder: the Cython one, or its pure-Python twin.

The pure one is used when ``STOMPFAST_NO_EXTENSIONS`` is set (to anything but an
empty string), on interpreters other than CPython, or when the extension was not
built. :data:`IMPLEMENTATION` says which one was loaded: ``"c"`` or ``"python"``.
"""

import os
import sys

IMPLEMENTATION: str

if os.environ.get("STOMPFAST_NO_EXTENSIONS") or sys.implementation.name != "cpython":
    from ._scanner_py import FrameScanner, encode_frame

    IMPLEMENTATION = "python"
else:
    try:
        from ._scanner_c import FrameScanner, encode_frame

        IMPLEMENTATION = "c"
    # A pure build (STOMPFAST_NO_EXTENSIONS at install time)
    except ImportError:
        from ._scanner_py import FrameScanner, encode_frame

        IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "FrameScanner", "encode_frame"]
