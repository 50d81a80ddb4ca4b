"""Run: python fuzz/fuzz_client.py -max_total_time=60   (atheris: pip install -e '.[fuzz]')

The client-level fuzz target: each input is what a server writes after CONNECTED
(and the SUBSCRIBE's RECEIPT) to a connected AsyncClient with a subscription, in
1-8 writes, then it closes. The client must end in a StompError (the close at the
latest), within 5 s, with the memory traced over the run bounded by its limits (1 MiB
frames, 64 KiB of headers). A crash (any other exception), a hang or unbounded memory
fails. Inputs are seeded from the fragments of tests/hostile.py. Replay a crash-*
file by passing it as the argument. Slower than the scanner target (a socket and a
client per input: tens of executions a second), so CI runs it briefly.
"""

from __future__ import annotations

import os
import sys

import anyio
import atheris

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

with atheris.instrument_imports():
    from hostile import FRAGMENTS, check_stream_outcome, run_stream

    import stompfast  # noqa: F401  (imported under instrumentation: the scanner, protocol and client)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    chunks = data[0] % 8 + 1
    payload = data[1:]
    outcome = anyio.run(run_stream, payload, chunks)
    check_stream_outcome(outcome, payload)


def main() -> None:
    argv = list(sys.argv)
    if not any(os.path.isfile(a) for a in argv[1:]) and not any(a.startswith("-dict=") for a in argv):
        import tempfile

        path = os.path.join(tempfile.gettempdir(), "stompfast-fuzz-client.dict")
        with open(path, "w") as out:
            for token in FRAGMENTS:
                out.write('"' + "".join(f"\\x{b:02x}" for b in token) + '"\n')
        argv.append(f"-dict={path}")
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
