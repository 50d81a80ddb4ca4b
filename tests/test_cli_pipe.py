"""``stompfast listen`` into a pipe whose reader leaves early (``| head -1``), on the in-process broker.

What docs/cli.md promises for a pipe on Linux: a message is acknowledged once its reader
has read it out of the pipe, and listen writes the next one only then, so a reader that
takes one line and exits (``head -1``) has consumed exactly that message; a reader that
leaves while listen waits for a message stops it at once (exit 141, nothing on stderr).
The same pipelines on the real brokers: tests/integration/test_cli_pipe_brokers.py.

No test here depends on timing: each waits for an event (a process exiting, the pipe
holding bytes) under a generous bound that only the old behaviour (a hang) reaches.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import uuid

import pytest

from stompfast import cli

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pipe watch is Linux's (cli/pipe.py)"),
]

# Bounds for what must happen promptly: generous for a loaded machine, where the old
# behaviour waited forever
PROMPTLY = 15


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}


def _listen(url: str, queue: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stompfast", "listen", "--url", url, queue, "-q", *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )


HEAD = ("head", "-1")
# Readers that take one line and exit, each its own way of reading a pipe
ONE_LINE_READERS = {
    "head": HEAD,
    "grep": ("grep", "-m1", "m"),
    "sh-read": ("sh", "-c", 'read -r line; echo "$line"'),
    "python": (sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.readline())"),
}


def listen_into_head(url: str, queue: str, *extra: str, reader: tuple[str, ...] = HEAD) -> tuple[int, bytes, bytes]:
    """``stompfast listen URL QUEUE -q EXTRA | head -1`` (or ``| reader``): listen's exit code,
    what the reader printed, listen's stderr."""
    listen = _listen(url, queue, *extra)
    assert listen.stdout is not None and listen.stderr is not None
    head = subprocess.Popen(reader, stdin=listen.stdout, stdout=subprocess.PIPE)
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


def unique_queue() -> str:
    return f"/queue/stompfast-pipe-{uuid.uuid4().hex[:12]}"


def test_the_kernel_facts_the_pipe_watch_relies_on() -> None:
    from stompfast.cli.pipe import OutputPipe, output_pipe

    read_end, write_end = os.pipe()
    try:
        pipe = output_pipe(open(write_end, "wb", closefd=False))
        assert isinstance(pipe, OutputPipe) and output_pipe(open(read_end, "rb", closefd=False)) is not None
        os.write(write_end, b"line one\nline two\n")
        # FIONREAD on the write end counts what the reader has not read yet
        assert pipe.unread_bytes() == 18
        os.read(read_end, 9)
        assert pipe.unread_bytes() == 9 and not pipe.reader_left()
        os.close(read_end)
        # POLLERR on the write end once the read end is closed; the unread bytes stay counted
        assert pipe.reader_left() and pipe.unread_bytes() == 9
    finally:
        os.close(write_end)
    # not a pipe, or no descriptor at all: acked once written
    with open(os.devnull, "wb") as devnull:
        assert output_pipe(devnull) is None
    assert output_pipe(io.BytesIO()) is None


def test_listen_into_head_with_one_message_exits_141_at_once(stomp_broker_thread) -> None:
    # The issue: head exited after its line while listen waited for a next message that
    # never came, and listen noticed only at its next write (10 minutes later)
    broker, queue = stomp_broker_thread, unique_queue()
    broker.publish(queue, b"only")
    code, shown, err = listen_into_head(broker.url, queue)
    assert (code, shown, err) == (cli.EXIT_BROKEN_PIPE, b"only\n", b"")
    broker.wait_for_blocking(lambda: broker.connections == 0)
    # head read it: acked, gone from the queue
    assert broker.stats.frames_in.get("ACK") == 1
    assert broker.queue_depth(queue) == broker.unacked(queue) == 0


@pytest.mark.parametrize("extra", [(), ("--json",), ("--ack", "client-individual"), ("--count", "3")],
                         ids=["default", "json", "client-individual", "count-3"])
def test_listen_into_head_acks_only_the_line_head_read(stomp_broker_thread, extra: tuple[str, ...]) -> None:
    # The issue: 1 or 2 of 3 messages were acked and never shown (written into the pipe's
    # buffer after the one head read, and lost with it)
    broker, queue = stomp_broker_thread, unique_queue()
    for body in (b"m1", b"m2", b"m3"):
        broker.publish(queue, body)
    code, shown, err = listen_into_head(broker.url, queue, *extra)
    assert (code, err) == (cli.EXIT_BROKEN_PIPE, b"")
    assert (json.loads(shown)["body"] if extra == ("--json",) else shown) in ("m1", b"m1\n")
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert broker.stats.frames_in.get("ACK") == 1
    assert (broker.queue_depth(queue), broker.unacked(queue)) == (2, 0)
    rest = subprocess.run(
        [sys.executable, "-m", "stompfast", "listen", "--url", broker.url, queue, "--count", "2", "-q"],
        stdin=subprocess.DEVNULL, capture_output=True, env=_env(), timeout=PROMPTLY, check=True,
    )
    assert sorted(rest.stdout.splitlines()) == [b"m2", b"m3"]


@pytest.mark.parametrize("reader", sorted(ONE_LINE_READERS))
def test_a_reader_that_takes_one_line_consumes_exactly_one_message(stomp_broker_thread, reader: str) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    for body in (b"m1", b"m2", b"m3"):
        broker.publish(queue, body)
    code, shown, err = listen_into_head(broker.url, queue, reader=ONE_LINE_READERS[reader])
    assert (code, shown, err) == (cli.EXIT_BROKEN_PIPE, b"m1\n", b"")
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert broker.stats.frames_in.get("ACK") == 1
    assert (broker.queue_depth(queue), broker.unacked(queue)) == (2, 0)


def test_listen_into_a_named_pipe_acks_only_what_its_reader_read(stomp_broker_thread, tmp_path) -> None:
    # --output FIFO is a pipe too: the same watch as stdout's
    broker, queue, fifo = stomp_broker_thread, unique_queue(), tmp_path / "fifo"
    os.mkfifo(fifo)
    for body in (b"m1", b"m2", b"m3"):
        broker.publish(queue, body)
    listen = _listen(broker.url, queue, "--output", str(fifo))
    assert listen.stderr is not None
    try:
        with open(fifo, "rb") as reader:
            head = subprocess.run(HEAD, stdin=reader, capture_output=True, timeout=PROMPTLY, check=True)
        assert listen.wait(timeout=PROMPTLY) == cli.EXIT_BROKEN_PIPE
        assert listen.stderr.read() == b""
    finally:
        listen.kill()
        listen.stderr.close()
    assert head.stdout == b"m1\n"
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert broker.stats.frames_in.get("ACK") == 1
    assert broker.queue_depth(queue) == 2


def _wait_until_readable(proc: subprocess.Popen) -> None:
    """Until listen has written into its stdout pipe (without reading any of it)."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], PROMPTLY)
    assert readable, "listen wrote nothing"


def test_a_line_written_but_never_read_is_not_acked(stomp_broker_thread) -> None:
    # A successful write is not a read: the reader leaves with the line still in the pipe
    broker, queue = stomp_broker_thread, unique_queue()
    broker.publish(queue, b"unread")
    proc = _listen(broker.url, queue)
    _wait_until_readable(proc)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    try:
        assert proc.wait(timeout=PROMPTLY) == cli.EXIT_BROKEN_PIPE
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.stderr.close()
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert "ACK" not in broker.stats.frames_in
    assert broker.queue_depth(queue) == 1


def test_a_listen_stopped_while_its_line_is_unread_leaves_it_unacked(stomp_broker_thread) -> None:
    # SIGTERM while the reader has not read the line: listen waits disconnect_timeout (5 s)
    # for the reader to take it, then leaves it to the broker (redelivered, not lost)
    broker, queue = stomp_broker_thread, unique_queue()
    broker.publish(queue, b"unread")
    proc = _listen(broker.url, queue)
    assert proc.stdout is not None and proc.stderr is not None
    _wait_until_readable(proc)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=PROMPTLY + 5) == cli.EXIT_TERMINATED
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.stderr.close()
    # it was written: the pipe still holds it, for a reader that comes late
    assert proc.stdout.read() == b"unread\n"
    proc.stdout.close()
    assert b"Traceback" not in err
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert "ACK" not in broker.stats.frames_in
    assert broker.queue_depth(queue) == 1
