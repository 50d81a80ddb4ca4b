"""The source's ACKs of a batch: paced on the broker's answers, off the read's thread (docs/brokers.md).

A whole batch of ``client-individual`` ACKs written at once stalled ActiveMQ
Classic's connection; ``_ReaderRuntime.send_acks`` sends more than ``ACK_STEP`` from
its worker thread, a step at a time, each after the broker answered a probe
(``Client.flush``). Scripted clients and messages record the order of what happens.
"""

from __future__ import annotations

import threading
from typing import Any, List, Tuple

import pytest

pytest.importorskip("pyspark")

from stompfast.spark import _source  # noqa: E402  (after the skip)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(30)]

Event = Tuple[str, Any]


class ScriptedClient:
    def __init__(self, log: List[Event], fail: bool = False, gate: "threading.Event | None" = None) -> None:
        self.log = log
        self.fail = fail
        self.gate = gate

    def flush(self, timeout: float) -> None:
        if self.gate is not None:
            self.gate.wait(timeout)
        self.log.append(("flush", None))
        if self.fail:
            raise TimeoutError("no RECEIPT")


class ScriptedMessage:
    def __init__(self, seq: int, log: List[Event], subscription: str = "s-0") -> None:
        self.seq = seq
        self.log = log
        self.subscription = subscription

    def ack(self) -> None:
        self.log.append(("ack", self.seq))


def runtime(clients: List[ScriptedClient], ack: str = "client-individual") -> Any:
    # The runtime without its connections: only what send_acks and close use
    rt = object.__new__(_source._ReaderRuntime)
    rt.ack = ack
    rt.clients = clients
    rt._ack_thread = None
    rt._last_job = None
    rt.closing = False
    return rt


def steps(log: List[Event]) -> List[Any]:
    """The log as runs of ACK counts and flushes: [500, 'flush', 500, ...]."""
    out: List[Any] = []
    for kind, _ in log:
        if kind == "flush":
            out.append("flush")
        elif out and out[-1] != "flush":
            out[-1] += 1
        else:
            out.append(1)
    return out


def test_a_large_batch_is_acked_a_step_at_a_time_each_after_the_brokers_answer() -> None:
    log: List[Event] = []
    rt = runtime([ScriptedClient(log)])
    n = 2 * _source.ACK_STEP + 7
    rt.send_acks([ScriptedMessage(i, log) for i in range(n)])
    rt._last_job.result(timeout=10)
    step = _source.ACK_STEP
    assert steps(log) == [step, "flush", step, "flush", 7]
    assert [seq for kind, seq in log if kind == "ack"] == list(range(n))
    rt.close()


def test_the_read_does_not_wait_for_the_paced_acks() -> None:
    log: List[Event] = []
    gate = threading.Event()
    rt = runtime([ScriptedClient(log, gate=gate)])
    rt.send_acks([ScriptedMessage(i, log) for i in range(_source.ACK_STEP + 1)])
    # The worker waits for the broker's answer; the caller is back already
    assert not rt._last_job.done()
    gate.set()
    rt._last_job.result(timeout=10)
    assert steps(log) == [_source.ACK_STEP, "flush", 1]
    rt.close()


def test_a_small_batch_is_acked_at_once_on_the_callers_thread() -> None:
    log: List[Event] = []
    rt = runtime([ScriptedClient(log)])
    rt.send_acks([ScriptedMessage(i, log) for i in range(_source.ACK_STEP)])
    assert steps(log) == [_source.ACK_STEP]
    assert rt._last_job is None


def test_without_an_answer_the_rest_go_out_unpaced() -> None:
    log: List[Event] = []
    rt = runtime([ScriptedClient(log, fail=True)])
    n = 3 * _source.ACK_STEP
    rt.send_acks([ScriptedMessage(i, log) for i in range(n)])
    rt._last_job.result(timeout=10)
    assert steps(log) == [_source.ACK_STEP, "flush", 2 * _source.ACK_STEP]
    rt.close()


def test_closing_sends_the_acks_under_way_without_waiting_for_answers() -> None:
    log: List[Event] = []
    gate = threading.Event()
    rt = runtime([ScriptedClient(log, gate=gate)])
    n = 3 * _source.ACK_STEP
    rt.send_acks([ScriptedMessage(i, log) for i in range(n)])
    # The first answer comes as the reader closes: no step waits after that
    threading.Timer(0.2, gate.set).start()
    rt.close()
    assert steps(log) == [_source.ACK_STEP, "flush", 2 * _source.ACK_STEP]


def test_cumulative_mode_acks_the_last_message_of_each_subscription_at_once() -> None:
    log: List[Event] = []
    rt = runtime([ScriptedClient(log)], ack="client")
    messages = [ScriptedMessage(i, log, f"s-{i % 2}") for i in range(3 * _source.ACK_STEP)]
    rt.send_acks(messages)
    assert sorted(seq for _, seq in log) == [len(messages) - 2, len(messages) - 1]
    assert rt._last_job is None
