"""``stompfast listen ... | head -1`` on each real broker: exactly the line head read is consumed.

The issue these reproduce was reported against the real brokers: 1 or 2 of 3 queued
messages acknowledged and never shown, and a listen that hung until a next message when
the queue held one. The in-process twins, and the kernel facts behind them, are in
tests/test_cli_pipe.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stompfast import cli

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pipe watch is Linux's (cli/pipe.py)"),
]

# Bounds for what must happen promptly (the old behaviour never ended): generous for a
# loaded machine and a broker that redelivers on a connection's close
PROMPTLY = 30


def stompfast(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    return subprocess.run(
        [sys.executable, "-m", "stompfast", *args, "-q"],
        stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=PROMPTLY, check=False,
    )


def listen_into_head(url: str, queue: str) -> tuple[int, bytes, bytes]:
    """``stompfast listen --url URL QUEUE -q | head -1``: listen's exit code, what head printed, listen's stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    listen = subprocess.Popen(
        [sys.executable, "-m", "stompfast", "listen", "--url", url, queue, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    assert listen.stdout is not None and listen.stderr is not None
    head = subprocess.Popen(["head", "-1"], stdin=listen.stdout, stdout=subprocess.PIPE)
    # head holds the only read end, as in a shell pipeline
    listen.stdout.close()
    try:
        shown, _ = head.communicate(timeout=PROMPTLY)
        code = listen.wait(timeout=PROMPTLY)
        err = listen.stderr.read()
    finally:
        listen.kill()
        head.kill()
        listen.stderr.close()
    return code, shown, err


def queue_messages(url: str, queue: str, *bodies: str) -> None:
    for body in bodies:
        assert stompfast("send", "--url", url, queue, body).returncode == 0


def left_on(url: str, queue: str, expected: int) -> list[bytes]:
    """The bodies still on ``queue``: the ``expected`` ones, then any more that come within a second."""
    bodies: list[bytes] = []
    if expected:
        # waits for them however long the broker takes to redeliver (up to PROMPTLY)
        got = stompfast("listen", "--url", url, queue, "--count", str(expected), "--timeout", str(PROMPTLY))
        bodies += got.stdout.splitlines()
    # a second's look for more: can only miss a late extra, never fail a right answer
    bodies += stompfast("listen", "--url", url, queue, "--timeout", "1").stdout.splitlines()
    return sorted(bodies)


def test_listen_into_head_with_one_message_exits_141_at_once(broker_url: str, queue: str) -> None:
    queue_messages(broker_url, queue, "only")
    code, shown, err = listen_into_head(broker_url, queue)
    assert (code, shown, err) == (cli.EXIT_BROKEN_PIPE, b"only\n", b"")
    # head read it: acked, gone from the queue
    assert left_on(broker_url, queue, 0) == []


def test_listen_into_head_acks_only_the_line_head_read(broker_url: str, queue: str) -> None:
    queue_messages(broker_url, queue, "m1", "m2", "m3")
    code, shown, err = listen_into_head(broker_url, queue)
    assert (code, shown, err) == (cli.EXIT_BROKEN_PIPE, b"m1\n", b"")
    # the two head never read are the broker's again, redelivered to the next consumer
    assert left_on(broker_url, queue, 2) == [b"m2", b"m3"]
