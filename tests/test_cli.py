"""The ``stompfast`` command, run as installed (a subprocess per invocation).

Most tests talk to the in-process broker running in a thread of this process
(``stomp_broker_thread``), so they can publish directly and inspect what the
command sent and acknowledged; one round trip goes through a ``stompfast broker
--port 0`` subprocess, which also tests that command; the same round trip and a
wrong password run against real RabbitMQ (and ActiveMQ when it runs). A few
in-process tests cover the helpers (masking, parsing, the rich fallback).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerenv import broker_url
from hostile import Conn, HostileServer

from stompfast import cli
from stompfast._config import parse_url
from stompfast._protocol import Message
from stompfast.frames import Frame

pytestmark = pytest.mark.timeout(60)

BINARY = bytes(range(256)) * 4 + b"\x00\xff\xfe not utf-8"


def _executable() -> str:
    found = shutil.which("stompfast", path=os.path.dirname(sys.executable)) or shutil.which("stompfast")
    if not found:
        pytest.fail("the stompfast command is not installed: pip install -e '.[test]'")
    return found


STOMPFAST = _executable()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env.update(extra or {})
    return env


def run(*args: str, input: bytes | None = None, env: dict[str, str] | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess:
    """Run the installed ``stompfast`` command; stdin is ``input`` or /dev/null."""
    return subprocess.run(
        [STOMPFAST, *args],
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        env=_env(env),
        timeout=timeout,
        check=False,
    )


def popen(*args: str) -> subprocess.Popen:
    """Start the command in the background, able to receive Ctrl-C (SIGINT)."""
    # A child inherits an *ignored* SIGINT (pytest run as a background job of a
    # shell without job control), and Python then never raises KeyboardInterrupt.
    # A handled one is reset to the default at exec, so lend this process a handler.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [STOMPFAST, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=_env(),
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def err_lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stderr.decode("utf-8", "replace").splitlines()


def assert_one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, result
    lines = err_lines(result)
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    assert lines[0].startswith("stompfast: error: ")
    assert result.stdout == b""
    return lines[0]


def unique_queue() -> str:
    return f"/queue/stompfast-cli-{uuid.uuid4().hex[:12]}"


# -- help -----------------------------------------------------------------------------------


def test_help_teaches() -> None:
    top = subprocess.run(
        [sys.executable, "-m", "stompfast", "--help"], capture_output=True, timeout=30, check=False
    )
    assert top.returncode == 0
    text = top.stdout.decode()
    assert text.startswith("usage: python -m stompfast")
    for word in ("send", "listen", "subscribe", "broker", "exit codes", "examples:"):
        assert word in text
    listen = run("subscribe", "--help")
    assert listen.returncode == 0
    text = listen.stdout.decode()
    for word in ("examples:", "--json", "--ack", "--timeout", "STOMPFAST_URL", "base64", "--heart-beat"):
        assert word in text


# -- round trips through the in-process broker --------------------------------------------------


@pytest.fixture(scope="module")
def broker_command() -> Iterator[str]:
    """``stompfast broker --port 0`` in a subprocess; yields the URL it printed."""
    proc = popen("broker", "--port", "0")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("stomp://127.0.0.1:"), url
        assert parse_url(url).port > 0
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert b"Traceback" not in err and b"broker stopped" in err


def test_round_trip_via_broker_command(broker_command: str, tmp_path: Path) -> None:
    queue = unique_queue()
    sent = run("send", "--url", broker_command, queue, "hello wörld", "-H", "x-order:42", "-H", "x-note:a:b")
    assert sent.returncode == 0, sent
    assert err_lines(sent) == [line for line in err_lines(sent) if line.startswith("sent 1 message")]
    assert "confirmed by the broker" in sent.stderr.decode()
    (tmp_path / "body.bin").write_bytes(BINARY)
    sent = run("send", "--url", broker_command, queue, "--file", str(tmp_path / "body.bin"),
               "--content-type", "application/octet-stream", "-q")
    assert sent.returncode == 0 and sent.stderr == b"", sent

    got = run("listen", "--url", broker_command, queue, "--json", "--count", "2", "--timeout", "10")
    assert got.returncode == 0, got
    first, second = [json.loads(line) for line in got.stdout.decode().splitlines()]
    assert first["destination"] == queue and first["message_id"]
    assert first["body"] == "hello wörld" and first["body_encoding"] == "utf-8"
    assert first["headers"]["x-order"] == "42" and first["headers"]["x-note"] == "a:b"
    assert first["headers"]["content-type"] == "text/plain;charset=utf-8"
    assert second["body_encoding"] == "base64"
    assert base64.b64decode(second["body"]) == BINARY
    assert second["headers"]["content-type"] == "application/octet-stream"
    assert "2 messages received" in got.stderr.decode()


def test_broker_command_memory_limit() -> None:
    """``broker --max-bytes --when-full error`` refuses the SEND that finds it full; ``send`` reports it."""
    proc = popen("broker", "--port", "0", "--max-bytes", "4K", "--when-full", "error")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        queue = unique_queue()
        # each 1000-byte message counts about 1.3 KiB (body, destination, 256 bytes of objects): 4 fit
        line = assert_one_line_error(run("send", "--url", url, queue, "x" * 1000, "--count", "10"), cli.EXIT_FAILURE)
        assert "sent ERROR: Memory limit reached" in line
        got = run("listen", "--url", url, queue, "--timeout", "1", "-q")
        assert got.returncode == 0 and got.stdout == (b"x" * 1000 + b"\n") * 4, got
        assert run("send", "--url", url, queue, "room again", "-q").returncode == 0
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and b"at 4.0 KiB of messages it refuses SENDs" in err, err
    bad = run("broker", "--max-bytes", "lots")
    assert bad.returncode == cli.EXIT_USAGE and b"--max-bytes" in bad.stderr


def test_binary_from_stdin_to_directory(stomp_broker_thread, tmp_path: Path) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    assert run("send", "--url", broker.url, queue, "-", input=BINARY).returncode == 0  # explicit '-'
    assert run("send", "--url", broker.url, queue, "--count", "2", input=BINARY).returncode == 0  # a pipe
    sends = [f for f in broker.received if f.command == "SEND"]
    assert [f.body for f in sends] == [BINARY] * 3
    assert all("content-type" not in f.headers for f in sends)  # bytes are sent as they are, unlabelled
    assert all("receipt" in f.headers for f in sends)  # confirmed by default

    out = tmp_path / "out"
    got = run("listen", "--url", broker.url, queue, "--output", f"{out}/", "--count", "3", "--timeout", "10")
    assert got.returncode == 0, got
    files = sorted(out.iterdir())
    assert [p.name[:7] for p in files] == ["000001-", "000002-", "000003-"]
    assert all(p.read_bytes() == BINARY for p in files)


def test_listen_text_lines_headers_and_file(stomp_broker_thread, tmp_path: Path) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    for body in ("one", "two", "three"):
        broker.publish(queue, body, headers={"x-k": body.upper()})
    got = run("listen", "--url", broker.url, queue, "--count", "2", "--timeout", "10", "-q")
    assert got.returncode == 0 and got.stderr == b"", got
    assert got.stdout == b"one\ntwo\n"

    target = tmp_path / "log.txt"
    target.write_bytes(b"old\n")
    got = run("subscribe", "--url", broker.url, queue, "--headers", "--count", "1", "--timeout", "10",
              "--output", str(target))
    assert got.returncode == 0 and got.stdout == b"", got
    head, body = target.read_bytes()[len(b"old\n"):].split(b"\n\n")
    assert body == b"three\n"
    assert b"x-k:THREE" in head.splitlines() and f"destination:{queue}".encode() in head.splitlines()


def test_listen_stats_prints_the_clients_metrics_at_the_end(stomp_broker_thread) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    for i in range(3):
        broker.publish(queue, f"m{i}")
    got = run("listen", "--url", broker.url, queue, "--count", "3", "--timeout", "10", "--stats")
    assert got.returncode == 0, got
    assert got.stdout == b"m0\nm1\nm2\n"  # data only: the metrics are for a person, on stderr
    lines = err_lines(got)
    head = lines.index("client stats:")
    assert lines[head - 1].startswith("received 3 messages")  # after the summary
    rows = {line.split("  ")[1]: line for line in lines[head + 1:]}
    assert rows.keys() == {"messages", "acks / nacks", "receipts", "losses / reconnects", "frames in / out",
                           "bytes in / out"}, lines
    assert rows["messages"].endswith(" 0 sent, 3 received")
    assert rows["acks / nacks"].endswith(" 3 / 0")
    assert rows["losses / reconnects"].endswith(" 0 / 0")
    # SUBSCRIBE and DISCONNECT asked for receipts: both came, with their round trip
    assert " 2 confirmed, 0 failed; round trip p50 " in rows["receipts"] and ", p99 " in rows["receipts"]
    frames_in, frames_out = (int(n) for n in rows["frames in / out"].split()[-3::2])
    assert frames_in == 3 + 1 + 2  # 3 MESSAGEs, CONNECTED, 2 RECEIPTs
    assert frames_out == len([f for f in broker.received if f.command != "CONNECT"]) + 1 == 1 + 1 + 3 + 1 + 1
    # -q silences the status lines, not the metrics asked for
    quiet = run("listen", "--url", broker.url, queue, "--timeout", "0.5", "--stats", "-q")
    assert quiet.returncode == 0 and err_lines(quiet)[0] == "client stats:", quiet
    assert " 0 sent, 0 received" in err_lines(quiet)[1]


def test_stats_line_and_block_of_a_sum_of_clients() -> None:
    from stompfast import ClientStats
    from stompfast.cli.common import stats_block, stats_line
    from stompfast.loadgen.clientstats import merge_records, stats_record

    one = stats_record(ClientStats(messages_sent=5, frames_out=6, bytes_out=2048, connection_losses=1,
                                   reconnects=1, frames_dropped=2, errors=1, receipts_failed=1))
    total = merge_records([one, one])
    block = stats_block(total)
    assert block[0] == "client stats (2 connections):"
    assert "10 sent, 0 received" in block[1]
    assert block[4].endswith("2 / 2  (2 ERROR frames)")
    assert block[5].endswith("0 / 12  (4 dropped with a lost connection)")
    assert block[6].endswith("0 bytes / 4.0 KiB")
    line = stats_line(total)
    assert "out 12 (4.0 KiB)" in line and "2 failed" in line and "losses 2  reconnects 2" in line


@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
def test_ack_modes_and_count(stomp_broker_thread, ack: str) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    for i in range(3):
        broker.publish(queue, f"m{i}")
    got = run("listen", "--url", broker.url, queue, "--ack", ack, "--count", "2", "--timeout", "10")
    assert got.returncode == 0, got
    assert got.stdout == b"m0\nm1\n"
    subscribe = next(f for f in broker.received if f.command == "SUBSCRIBE")
    assert subscribe.headers["ack"] == ack
    acks = [f for f in broker.received if f.command == "ACK"]
    if ack == "auto":
        assert acks == []
    else:
        assert len(acks) == 2  # one per message, after it was written
        assert subscribe.headers["prefetch-count"] == "2"  # no more in flight than --count
        # the third message was never taken: it is still there for the next consumer
        broker.wait_for_blocking(lambda: broker.consumers(queue) == 0)
        assert broker.queue_depth(queue) == 1 and broker.unacked(queue) == 0


def test_listen_auto_on_a_deep_queue_whose_receipt_comes_late(stomp_broker_thread) -> None:
    """``listen --ack auto --count N`` on a deep queue prints N messages and exits 0.

    The broker delivers before it confirms the SUBSCRIBE, and with no prefetch in
    auto mode the messages fill the subscription's buffer (--count 5: 5 messages)
    and stop the reader with the RECEIPT behind them. Before a MESSAGE counted as
    the confirmation the command waited for that RECEIPT until the client's
    stall_timeout (10 s) and exited 1 with FlowControlError.
    """
    broker, queue = stomp_broker_thread, unique_queue()
    bodies = [b"%04d" % i + b"." * 996 for i in range(2000)]
    for body in bodies:
        broker.publish(queue, body)
    broker.delay_receipts(1.5)
    got = run("listen", "--url", broker.url, queue, "--ack", "auto", "--count", "5", timeout=30)
    assert got.returncode == 0, got.stderr.decode()
    assert got.stdout == b"".join(body + b"\n" for body in bodies[:5])
    assert b"5 messages received" in got.stderr


def _in_flight(broker) -> tuple[int, int]:
    """SENDs the broker handled, and how many of them still await their RECEIPT."""
    stats = broker.stats
    sends = stats.frames_in.get("SEND", 0)
    return sends, sends - stats.frames_out.get("RECEIPT", 0)


def test_send_keeps_at_most_a_window_of_receipts_in_flight(stomp_broker_thread) -> None:
    """``send --count`` waits for the oldest receipt once --receipt-window are unconfirmed, then for all."""
    broker, queue = stomp_broker_thread, unique_queue()
    broker.delay_receipts(1.0)  # each RECEIPT leaves 1 s after its SEND was handled
    proc = popen("send", "--url", broker.url, queue, "m", "--count", "30", "--receipt-window", "10")
    try:
        broker.wait_for_blocking(lambda: _in_flight(broker)[0] >= 10, timeout=20)
        time.sleep(0.3)  # well before the first receipt: a client without a window has sent all 30
        assert _in_flight(broker) == (10, 10)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _in_flight(broker)[1])
            time.sleep(0.005)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out == b"" and "sent 30 messages of 1 byte" in err.decode() and b"confirmed by the broker" in err
    assert peak == 10  # the window was used, and never exceeded
    sends = [f for f in broker.received if f.command == "SEND"]
    assert len(sends) == 30 and len({f.headers["receipt"] for f in sends}) == 30
    assert broker.stats.frames_out["RECEIPT"] >= 30 and broker.queue_depth(queue) == 30


def test_send_reports_a_refused_message_inside_the_window(stomp_broker_thread) -> None:
    """A SEND the broker answers with ERROR fails the command as it did without a window."""
    line = assert_one_line_error(
        run("send", "--url", stomp_broker_thread.url, "/nowhere/a", "x", "--count", "5", "--receipt-window", "2"),
        cli.EXIT_FAILURE,
    )
    assert "sent ERROR: Unknown destination" in line


def test_receipt_window_must_be_positive() -> None:
    bad = run("send", "/queue/a", "x", "--receipt-window", "0")
    assert bad.returncode == cli.EXIT_USAGE and b"--receipt-window" in bad.stderr and b"Traceback" not in bad.stderr


@pytest.mark.parametrize("how", ["timeout", "duration"])
def test_listen_stops_when_idle_or_elapsed(stomp_broker_thread, how: str) -> None:
    args = ["--timeout", "0.3"] if how == "timeout" else ["--duration", "0.3", "--timeout", "30"]
    started = time.monotonic()
    got = run("listen", "--url", stomp_broker_thread.url, unique_queue(), *args)
    assert got.returncode == 0, got
    assert got.stdout == b""
    assert time.monotonic() - started < 10
    summary = err_lines(got)[-1]
    assert summary.startswith("received 0 messages")
    assert ("nothing for 0.3 s" if how == "timeout" else "0.3 s elapsed") in summary


def test_ctrl_c_exits_130_without_traceback(stomp_broker_thread) -> None:
    proc = popen("listen", "--url", stomp_broker_thread.url, unique_queue())
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"listening on ")  # subscribed
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == cli.EXIT_INTERRUPTED
    assert b"Traceback" not in err and b"interrupted" in err and out == b""
    stomp_broker_thread.wait_for_blocking(lambda: stomp_broker_thread.connections == 0)


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://guest:topsecret@127.0.0.1/", "stomp//guest:topsecret@host", "stomp://guest:topsecret@h:port/"]
)
def test_bad_url_is_a_usage_error(url: str) -> None:
    line = assert_one_line_error(run("send", "--url", url, "/queue/a", "x"), cli.EXIT_USAGE)
    assert "--url" in line
    assert "topsecret" not in line


@pytest.mark.parametrize("char", ["/", "#", "?", ",", "@", "[", "]", ")", ":"])
@pytest.mark.parametrize("encoded", [False, True], ids=["raw", "encoded"])
def test_no_error_line_shows_the_passcode(char: str, encoded: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """In process, so that this checkout's code runs: parse errors (exit 2) and connect errors (exit 1)."""
    from urllib.parse import quote

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    secret = f"9137{char}8642"
    url = f"stomp://guest:{quote(secret, safe='') if encoded else secret}@127.0.0.1:{port}/"
    code = cli.main(["send", "--url", url, "--connect-timeout", "5", "-q", "/queue/a", "x"])
    line = capsys.readouterr().err.replace(str(port), "PORT")
    assert line.startswith("stompfast: error: ") and line.count("\n") == 1, line
    assert "9137" not in line and "8642" not in line, line
    if not encoded and char in "/#?":
        assert code == cli.EXIT_USAGE and "ambiguous" in line and "%2F" in line
    elif not encoded and char in "[]":
        assert code == cli.EXIT_USAGE and "%5B" in line
    else:
        assert code == cli.EXIT_FAILURE and "could not connect" in line


def test_usage_errors_exit_2() -> None:
    line = assert_one_line_error(run("send", "/queue/a", "x", "--file", "y"), cli.EXIT_USAGE)
    assert "not both" in line
    bad = run("send", "/queue/a", "x", "-H", "no-colon")  # argparse: usage line plus the error
    assert bad.returncode == cli.EXIT_USAGE and b"NAME:VALUE" in bad.stderr and b"Traceback" not in bad.stderr


def test_refused_connection_exits_1() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = assert_one_line_error(
        run("send", "--url", f"stomp://127.0.0.1:{port}/", "/queue/a", "x"), cli.EXIT_FAILURE
    )
    assert f"127.0.0.1:{port}" in line


@pytest.mark.parametrize("command", ["send", "listen"])
@pytest.mark.parametrize("answer,quote", [
    (b"AMQP\x00\x00\x09\x01", r"b'AMQP\x00\x00\t\x01'"),
    (b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
     r"b'HTTP/1.1 400 Bad Request\r\n'..."),
], ids=["amqp", "http"])
def test_a_port_that_is_not_stomp_is_named_in_one_line(command: str, answer: bytes, quote: str) -> None:
    def handler(conn: Conn) -> None:
        conn.sock.settimeout(5)
        conn.sock.recv(65536)
        conn.send_raw(answer)

    with HostileServer(handler) as server:
        args = [command, "--url", f"stomp://guest:s3cret-pass@127.0.0.1:{server.port}/", "/queue/a"]
        line = assert_one_line_error(run(*args, *(["x"] if command == "send" else [])), cli.EXIT_FAILURE)
    assert line == (f"stompfast: error: the server at 127.0.0.1:{server.port} does not speak STOMP"
                    f" (it answered {quote}): is this the broker's STOMP port?")


@pytest.mark.stomp_broker(users={"app": "right-pass-1"})
def test_passcodes_are_masked_and_flags_win(stomp_broker_thread) -> None:
    broker = stomp_broker_thread
    env = {"STOMPFAST_URL": f"stomp://app:wrong-pass-9@127.0.0.1:{broker.port}/"}
    refused = run("send", "/queue/a", "x", env=env)
    line = assert_one_line_error(refused, cli.EXIT_FAILURE)
    assert "Bad CONNECT" in line and f"stomp://app:***@127.0.0.1:{broker.port}/" in line
    assert "wrong-pass" not in line

    # --passcode beats the passcode of $STOMPFAST_URL; neither is printed
    sent = run("send", "--passcode", "right-pass-1", "/queue/a", "x", env=env)
    assert sent.returncode == 0, sent
    assert f"at stomp://app:***@127.0.0.1:{broker.port}/" in sent.stderr.decode()
    assert b"pass-" not in sent.stderr


# -- real brokers ---------------------------------------------------------------------------------

REAL_BROKERS = {name: broker_url(name) for name in ("rabbitmq", "activemq", "artemis")}


def _real_broker(name: str) -> str:
    url = REAL_BROKERS[name]
    ep = parse_url(url)
    try:
        with socket.create_connection((ep.host, ep.port), timeout=3) as s:
            s.settimeout(5)
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
            answers = s.recv(64).startswith(b"CONNECTED")
    except OSError:
        answers = False
    if not answers:
        message = f"{name} does not answer STOMP at {url} (scripts/brokers.sh start)"
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(REAL_BROKERS))
def test_round_trip_real_broker(name: str) -> None:
    url, queue = _real_broker(name), unique_queue()
    assert run("send", "--url", url, queue, "héllo", "-H", "x-order:7", "-q").returncode == 0
    assert run("send", "--url", url, queue, "-q", input=BINARY).returncode == 0
    got = run("listen", "--url", url, queue, "--json", "--count", "2", "--timeout", "10")
    assert got.returncode == 0, got
    first, second = [json.loads(line) for line in got.stdout.decode().splitlines()]
    assert (first["body"], first["body_encoding"], first["headers"]["x-order"]) == ("héllo", "utf-8", "7")
    assert second["body_encoding"] == "base64" and base64.b64decode(second["body"]) == BINARY
    assert first["destination"] == second["destination"] == queue


@pytest.mark.integration
def test_wrong_vhost_real_rabbitmq_masks_the_url_as_a_wrong_password_does() -> None:
    ep = parse_url(_real_broker("rabbitmq"))
    url = f"stomp://guest:guest@{ep.host}:{ep.port}/no-such-vhost-{uuid.uuid4().hex[:6]}"
    line = assert_one_line_error(run("send", "--url", url, unique_queue(), "x"), cli.EXIT_FAILURE)
    assert "access denied" in line and f"stomp://guest:***@{ep.host}:{ep.port}/no-such-vhost" in line, line


@pytest.mark.integration
def test_wrong_password_real_rabbitmq() -> None:
    ep = parse_url(_real_broker("rabbitmq"))
    url = f"stomp://guest:Wr0ng-S3cret@{ep.host}:{ep.port}/"
    line = assert_one_line_error(run("send", "--url", url, unique_queue(), "x"), cli.EXIT_FAILURE)
    assert "Access refused" in line and "guest:***@" in line
    assert "Wr0ng" not in line


# -- helpers, in process --------------------------------------------------------------------------


def test_mask() -> None:
    assert cli.mask("in 'stomp://bob:s3cr3t@h:1/'") == "in 'stomp://***@h:1/'"
    assert cli.mask("stomp//bob:s3cr3t@h") == "stomp//***@h"  # even in a URL too broken to parse
    assert cli.mask("in 'stomp://bob:s3/cr#3t@h:1/'") == "in 'stomp://***@h:1/'"  # up to the last '@'
    assert cli.mask("at stomp://bob:***@h:1/ for bob@example.com") == "at stomp://bob:***@h:1/ for bob@example.com"
    assert cli.mask("denied: hunter2x", ["hunter2x", None, ""]) == "denied: ***"
    assert cli.mask("see the message", ["e"]) == "see the message"  # too short to mask outside URLs


def test_a_login_equal_to_the_passcode_is_masked_like_any_login() -> None:
    # guest/guest: the URL shows as guest:***@ as with any other passcode; elsewhere the secret is hidden
    line = "the broker at stomp://guest:***@h:1/novhost refused: user guest, vhost novhost"
    assert cli.mask(line, ["guest"]) == "the broker at stomp://guest:***@h:1/novhost refused: user ***, vhost novhost"
    assert cli.mask(line, ["wrong-pass"]) == line
    assert cli.mask("at stomp://guest:guest@h:1/", ["guest"]) == "at stomp://***@h:1/"  # as written: all hidden


@pytest.mark.stomp_broker(users={"guest": "right-pass-1"})
def test_a_refused_url_is_masked_alike_whatever_the_passcode(stomp_broker_thread) -> None:
    port = stomp_broker_thread.port
    for passcode in ("wrong-pass", "guest"):  # the second is the same string as the login
        line = assert_one_line_error(
            run("send", "--url", f"stomp://guest:{passcode}@127.0.0.1:{port}/", "/queue/a", "x"), cli.EXIT_FAILURE)
        assert f"the broker at stomp://guest:***@127.0.0.1:{port}/ refused the session" in line, line
        assert "wrong-pass" not in line
    assert cli.display_url("h", 1, "bob", "s3cr3t", "/") == "stomp://bob:***@h:1/"
    assert cli.display_url("::1", 1, None, None, "vh") == "stomp://[::1]:1/vh"


def test_argument_parsers() -> None:
    assert cli.parse_heart_beat("0,5000") == (0, 5000)
    assert cli.parse_versions("1.1, 1.2") == ("1.1", "1.2")
    assert cli.parse_header("x-a:b:c") == ("x-a", "b:c")
    for parse, text in [(cli.parse_heart_beat, "5"), (cli.parse_heart_beat, "-1,0"),
                        (cli.parse_versions, "2.0"), (cli.parse_header, ":v")]:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_connection_settings_precedence() -> None:
    parser = cli.build_parser()

    def conn(argv: list[str], env: dict[str, str]) -> cli.Connection:
        return cli.Connection(parser.parse_args(["send", "/queue/a", "x", *argv]), env)

    c = conn([], {})
    assert (c.host, c.port, c.login, c.passcode, c.vhost) == ("127.0.0.1", 61613, None, None, "/")
    env = {"STOMPFAST_URL": "stomp://u1:p1@envhost:1/v", "STOMPFAST_LOGIN": "u2", "STOMPFAST_PASSCODE": "p2"}
    c = conn([], env)
    assert (c.host, c.login, c.passcode, c.vhost) == ("envhost", "u2", "p2", "v")  # the variables beat the URL's
    c = conn(["--url", "stomp://u3:p3@flaghost/"], env)
    assert (c.host, c.login, c.passcode, c.vhost) == ("flaghost", "u3", "p3", "/")  # the flag's URL beats them
    c = conn(["--url", "stomp://flaghost", "--login", "u4", "--vhost", "x"], env)
    assert (c.login, c.passcode, c.vhost) == ("u4", "p2", "x")
    assert c.url == "stomp://u4:***@flaghost:61613/x"
    assert set(c.secrets) >= {"p2"}


def test_json_record_of_binary_and_text() -> None:
    frame = Frame("MESSAGE", [("destination", "/queue/a"), ("message-id", "7"), ("x", "1"), ("x", "2")], BINARY)
    record = json.loads(cli.message_record(Message(frame, "s1", "7", "7", None), True, False))
    assert record == {
        "destination": "/queue/a", "message_id": "7", "subscription": "s1",
        "headers": {"destination": "/queue/a", "message-id": "7", "x": "1"},
        "body": base64.b64encode(BINARY).decode(), "body_encoding": "base64",
    }
    plain = cli.message_record(Message(frame, "s1", "7", "7", None), False, True)
    assert plain.startswith(b"destination:/queue/a\nmessage-id:7\nx:1\nx:2\n\n") and plain.endswith(BINARY)


class _Terminal:
    """A text stream that says it is a terminal."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_status_works_without_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError
    monkeypatch.setitem(sys.modules, "rich.console", None)
    status = cli.Status()
    assert status.console is None
    status.info("hello")
    with status.live(lambda: "progress", to_stdout=False):
        pass
    assert "".join(terminal.written) == "hello\n"
    cli.Status(quiet=True).info("not shown")
    assert "".join(terminal.written) == "hello\n"


def test_status_uses_rich_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert cli.Status().console is not None


def _add_hello(subparsers) -> None:
    p = subparsers.add_parser("hello", help="say hello")
    p.set_defaults(run=lambda args, ctx: 7)


def test_a_subcommand_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "COMMANDS", [*cli.COMMANDS, f"{__name__}:_add_hello"])
    assert cli.main(["hello"]) == 7


def _tls_url_and_ca() -> tuple[str, str]:
    url, ca = os.environ.get("STOMPFAST_RABBITMQ_TLS_URL"), os.environ.get("STOMPFAST_TLS_CA")
    if not url or not ca:
        if os.environ.get("STOMPFAST_REQUIRE_BROKERS") == "1":
            pytest.fail("STOMPFAST_RABBITMQ_TLS_URL/STOMPFAST_TLS_CA not set (eval \"$(scripts/brokers.sh env)\")")
        pytest.skip("no RabbitMQ TLS listener (scripts/brokers.sh start; eval its env)")
    return url, ca


@pytest.mark.integration
def test_round_trip_over_tls_and_a_refused_certificate_real_rabbitmq() -> None:
    url, ca = _tls_url_and_ca()
    queue = unique_queue()
    assert run("send", "--url", url, "--cafile", ca, queue, "over tls", "-q").returncode == 0
    got = run("listen", "--url", url, "--cafile", ca, queue, "--count", "1", "--timeout", "10")
    assert got.returncode == 0 and got.stdout.decode().strip() == "over tls", got
    # without --cafile the system store is used: the test CA is not in it
    line = assert_one_line_error(run("send", "--url", url, queue, "x"), cli.EXIT_FAILURE)
    assert "certificate" in line.lower(), line
    assert "guest:guest@" not in line  # the passcode is masked


# -- TLS flags fit what was given ----------------------------------------------------------------


def _args(*argv: str) -> Any:
    return cli.build_parser("stompfast").parse_args(["send", *argv, "/queue/x", "b"])


@pytest.mark.parametrize("url,shown", [
    ("ws://guest:pw@127.0.0.1:15674/ws", "ws://guest:***@127.0.0.1:15674/ws"),
    ("wss://h/stomp", "wss://h:443/stomp"),
    ("stomp+ssl://u:pw@h:61617/", "stomp+ssl://u:***@h:61617/"),
    ("stomp://h/vh", "stomp://h:61613/vh"),
])
def test_the_status_line_shows_the_urls_own_scheme_and_path(url: str, shown: str) -> None:
    assert cli.Connection(_args("--url", url), environ={}).url == shown


def test_tls_flags_on_a_plain_url_are_refused_not_a_silent_switch_to_tls(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("not a certificate")
    for flag in ("--cafile", "--cert"):
        line = assert_one_line_error(run("send", "--url", "stomp://127.0.0.1:1/", flag, str(pem), "/queue/x", "b"),
                                     cli.EXIT_USAGE)
        assert f"{flag} is for TLS" in line and "stomp+ssl://" in line
    line = assert_one_line_error(run("send", "--url", "stomp+ssl://127.0.0.1:1/", "--cafile", str(pem), "/queue/x",
                                     "b"), cli.EXIT_USAGE)
    assert "not a PEM file of CA certificates" in line and "Traceback" not in line
    line = assert_one_line_error(run("send", "--url", "stomp+ssl://127.0.0.1:1/", "--key", str(pem), "/queue/x",
                                     "b"), cli.EXIT_USAGE)
    assert "--key needs --cert" in line


def test_cafile_and_a_client_certificate_against_a_broker_that_requires_one(tmp_path: Path) -> None:
    import ssl

    import trustme

    from stompfast.testing import Broker

    ca, other = trustme.CA(), trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    server.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: the broker checks the client's certificate
    ca.configure_trust(server)
    ca_pem, other_pem = tmp_path / "ca.pem", tmp_path / "other.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    other.cert_pem.write_to_path(str(other_pem))
    client_cert = ca.issue_cert("client@example")
    cert_pem, key_pem = tmp_path / "client.pem", tmp_path / "client.key"
    for blob in client_cert.cert_chain_pems:
        blob.write_to_path(str(cert_pem), append=True)
    client_cert.private_key_pem.write_to_path(str(key_pem))
    with Broker.in_thread(ssl_context=server) as broker:
        url = broker.url
        assert url.startswith("stomp+ssl://")
        ok = run("send", "--url", url, "--cafile", str(ca_pem), "--cert", str(cert_pem), "--key", str(key_pem),
                 "/queue/mtls", "hello")
        assert ok.returncode == 0, ok
        assert "stomp+ssl://" in ok.stderr.decode()
        assert broker.queue_depth("/queue/mtls") == 1
        # the broker's certificate is not signed by the CA given: the hint says so
        line = assert_one_line_error(run("send", "--url", url, "--cafile", str(other_pem), "/queue/mtls", "x"),
                                     cli.EXIT_FAILURE)
        assert str(other_pem) in line and "not signed by a CA" in line
        # no client certificate: the broker refuses the handshake
        assert run("send", "--url", url, "--cafile", str(ca_pem), "--connect-timeout", "3", "/queue/mtls",
                   "x").returncode == cli.EXIT_FAILURE


def test_an_empty_stdin_that_is_not_a_pipe_or_file_is_a_missing_body(tmp_path: Path) -> None:
    # cron, systemd and `docker run` without -i give /dev/null: a forgotten BODY must not send ""
    line = assert_one_line_error(run("send", "--url", "stomp://127.0.0.1:1/", "/queue/x"), cli.EXIT_USAGE)
    assert "no body" in line and "stdin is empty" in line
    # an empty pipe, an empty file and an explicit '' are deliberate: they get as far as connecting
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for got in (
        run("send", "--url", "stomp://127.0.0.1:1/", "--connect-timeout", "2", "/queue/x", input=b""),
        run("send", "--url", "stomp://127.0.0.1:1/", "--connect-timeout", "2", "--file", str(empty), "/queue/x"),
        run("send", "--url", "stomp://127.0.0.1:1/", "--connect-timeout", "2", "/queue/x", ""),
    ):
        assert got.returncode == cli.EXIT_FAILURE and b"could not connect" in got.stderr, got


# -- stopped by a signal: a clean close, a summary, 130 / 143 -------------------------------------


@pytest.mark.parametrize("sig,code,word", [
    (signal.SIGTERM, cli.EXIT_TERMINATED, "terminated (SIGTERM)"),
    (signal.SIGINT, cli.EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
])
def test_a_stopped_send_closes_cleanly_and_says_what_it_did(stomp_broker_thread, sig, code, word) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    proc = popen("send", "--url", broker.url, "--count", "100000000", "--json", queue, "x")
    # At most the receipt window (1,000) is sent and unconfirmed at any time, so with more
    # than 2,000 stored more than 1,000 are confirmed (at 1,001 stored the receipts may
    # still be on their way: CI once saw confirmed == 1,000)
    broker.wait_for_blocking(lambda: broker.queue_depth(queue) > 2000, 30)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert b"Traceback" not in err
    summary = json.loads(out)
    assert summary["stopped"] == word and summary["count"] == 100_000_000
    assert 1000 < summary["confirmed"] <= summary["sent"] < 100_000_000
    assert f"{word}: sent {summary['sent']:,} of 100,000,000, {summary['confirmed']:,} confirmed" in err.decode()
    assert broker.stats.frames_in.get("DISCONNECT") == 1  # left the broker cleanly
    # nothing confirmed was lost: the broker holds at least every confirmed message
    assert broker.queue_depth(queue) >= summary["confirmed"]


def test_a_listen_stopped_by_sigterm_exits_143_with_its_summary(stomp_broker_thread) -> None:
    proc = popen("listen", "--url", stomp_broker_thread.url, unique_queue())
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(b"listening on ")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == cli.EXIT_TERMINATED
    assert b"Traceback" not in err and b"received 0 messages" in err and b"terminated (SIGTERM)" in err
    stomp_broker_thread.wait_for_blocking(lambda: stomp_broker_thread.connections == 0)


def test_a_listen_stopped_by_sigterm_acked_every_message_it_printed(stomp_broker_thread) -> None:
    # listen drains on SIGTERM: the message in hand is written and acked first, so what
    # was printed is exactly what was acked, and the rest stays on the queue
    broker, queue = stomp_broker_thread, unique_queue()
    for i in range(20000):
        broker.publish(queue, b"m%d" % i)
    proc = popen("listen", "--url", broker.url, "--ack", "client-individual", queue)
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(100):
        proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    # (read through the same buffered reader: communicate() would skip what readline buffered)
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=20)
    printed = 100 + len(out.splitlines())
    assert proc.returncode == cli.EXIT_TERMINATED, err
    broker.wait_for_blocking(lambda: broker.connections == 0)
    assert broker.stats.frames_in.get("ACK") == printed < 20000
    assert broker.stats.frames_in.get("DISCONNECT") == 1
    assert broker.queue_depth(queue) == 20000 - printed


def test_the_broker_command_stopped_by_sigterm_exits_143() -> None:
    proc = popen("broker", "--port", "0")
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"stomp://")
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=10)
    assert proc.returncode == cli.EXIT_TERMINATED and b"broker stopped: terminated (SIGTERM)" in err


# -- stdout's reader leaving early (| head -1) -------------------------------------------------------


def _listen_until_the_reader_leaves(url: str, queue: str, *extra: str) -> tuple[int, bytes, bytes]:
    """``python -m stompfast listen`` into a pipe whose reader takes one line and closes it.

    The queue holds far more than a pipe's buffer (64 KiB on Linux), so the command is
    still writing when the read end closes, and its next write fails with EPIPE.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompfast", "listen", "--url", url, queue, *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    try:
        err = proc.stderr.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    return proc.returncode, first, err


def test_listen_whose_reader_leaves_exits_141_quietly(stomp_broker_thread) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    body = "m" * 1024
    for _ in range(300):
        broker.publish(queue, body)
    code, first, err = _listen_until_the_reader_leaves(broker.url, queue, "-q")
    assert first == body.encode() + b"\n"
    # 141 as `yes | head -1` gives, and nothing on stderr: no error line, no traceback,
    # no "Exception ignored ... BrokenPipeError" from the interpreter's final flush
    assert (code, err) == (cli.EXIT_BROKEN_PIPE, b"")
    broker.wait_for_blocking(lambda: broker.connections == 0)
    # the message whose write failed was not acknowledged: it is still the broker's
    assert broker.queue_depth(queue) + broker.unacked(queue) >= 1


def test_listen_whose_reader_leaves_prints_only_its_status_line(stomp_broker_thread) -> None:
    broker, queue = stomp_broker_thread, unique_queue()
    for _ in range(300):
        broker.publish(queue, "j" * 1024)
    code, first, err = _listen_until_the_reader_leaves(broker.url, queue, "--json")
    assert code == cli.EXIT_BROKEN_PIPE and json.loads(first)["destination"] == queue
    assert err.decode().splitlines() == [line for line in err.decode().splitlines() if line.startswith("listening on ")]


@pytest.mark.integration
def test_listen_whose_reader_leaves_exits_141_real_rabbitmq() -> None:
    url, queue = _real_broker("rabbitmq"), unique_queue()
    assert run("send", "--url", url, queue, "r" * 1024, "--count", "300", "-q").returncode == 0
    try:
        code, first, err = _listen_until_the_reader_leaves(url, queue, "-q")
        assert first == b"r" * 1024 + b"\n"
        assert (code, err) == (cli.EXIT_BROKEN_PIPE, b"")
    finally:
        # drain what is left, so the broker keeps no backlog of this test
        run("listen", "--url", url, queue, "--timeout", "1", "--ack", "auto", "-q")


@pytest.mark.parametrize("command", ["send", "bench"])
def test_send_and_bench_whose_stdout_is_closed_exit_141_quietly(stomp_broker_thread, command: str) -> None:
    # their output comes at the end: a reader that already left makes the one write fail
    args = (["send", "--url", stomp_broker_thread.url, unique_queue(), "x", "--json"] if command == "send"
            else ["bench", "--count", "200", "--json"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "stompfast", *args, "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (cli.EXIT_BROKEN_PIPE, b"")


def test_a_broken_pipe_is_found_inside_exception_groups() -> None:
    from stompfast.cli import is_broken_pipe

    groups = cli._exception_groups()
    assert groups, "no exception group class found"
    for group in groups:
        nested = group("outer", [group("inner", [ValueError("x"), BrokenPipeError(32, "Broken pipe")])])
        assert is_broken_pipe(nested)
        assert is_broken_pipe(group("with a cancelled sibling", [KeyboardInterrupt(), BrokenPipeError()]))
        assert not is_broken_pipe(group("other", [ConnectionResetError(), OSError(5, "Input/output error")]))
    assert is_broken_pipe(BrokenPipeError()) and not is_broken_pipe(OSError("other"))


@pytest.mark.anyio
async def test_a_broken_pipe_raised_in_a_task_group_is_recognised() -> None:
    # what anyio raises on this backend and Python (the builtin group, or the
    # exceptiongroup backport's on 3.9/3.10): the case listen hit under `| head -1`
    import anyio

    from stompfast.cli import is_broken_pipe

    async def write() -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BaseException) as caught:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)
            tg.start_soon(write)
    assert not isinstance(caught.value, BrokenPipeError)  # it came wrapped: the point of the test
    assert is_broken_pipe(caught.value)


def test_every_flag_of_every_command_is_in_the_docs() -> None:
    # docs/cli.md (bench: docs/loadgen.md) must name each option as it is written
    import argparse as _argparse
    import re

    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "cli.md").read_text() + (root / "docs" / "loadgen.md").read_text()
    parser = cli.build_parser("stompfast")
    (commands,) = [a for a in parser._actions if isinstance(a, _argparse._SubParsersAction)]
    missing = [
        f"{name} {opt}"
        for name, sub in commands.choices.items()
        for action in sub._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt != "--help" and not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", docs)
    ]
    assert len(commands.choices) >= 4 and not missing, missing
