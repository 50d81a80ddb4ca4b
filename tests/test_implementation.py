"""Which scanner ``import stompfast`` loads, and the public namespace."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import no_extensions

import stompfast
import stompfast._scanner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_expected_implementation_is_loaded():
    if no_extensions():
        import stompfast._scanner_py as pure

        assert stompfast._scanner.IMPLEMENTATION == "python"
        assert stompfast.FrameScanner is pure.FrameScanner
        assert stompfast.encode_frame is pure.encode_frame
    else:
        # A normal install builds the extension; falling back silently to the pure
        # scanner would be a broken wheel or a broken build.
        import stompfast._scanner_c as compiled

        assert stompfast._scanner.IMPLEMENTATION == "c"
        assert stompfast.FrameScanner is compiled.FrameScanner
        assert stompfast.encode_frame is compiled.encode_frame


def test_environment_variable_selects_the_pure_scanner_at_import_time():
    env = dict(os.environ, STOMPFAST_NO_EXTENSIONS="1")
    code = (
        "import stompfast, stompfast._scanner as s, stompfast._scanner_py as p;"
        "print(s.IMPLEMENTATION, stompfast.FrameScanner is p.FrameScanner,"
        " stompfast.encode_frame is p.encode_frame)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["python", "True", "True"]


def test_all_is_sorted_and_every_name_resolves():
    assert list(stompfast.__all__) == sorted(stompfast.__all__)
    assert len(set(stompfast.__all__)) == len(stompfast.__all__)
    for name in stompfast.__all__:
        assert getattr(stompfast, name) is not None, name
    # The fixed contract names are all exported.
    for name in (
        "FrameScanner",
        "Frame",
        "encode_frame",
        "ProtocolError",
        "LocalProtocolError",
        "RemoteProtocolError",
        "LimitExceededError",
        "ConfigurationError",
    ):
        assert name in stompfast.__all__, name
