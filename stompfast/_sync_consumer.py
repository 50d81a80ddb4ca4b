"""The blocking client's handler consumption: ``client.consume(destination, handler, concurrency=N)``.

A :class:`Consumer` runs ``concurrency`` threads over one sync subscription. Each
thread takes a message, calls ``handler(message)`` and settles it as the async
:class:`~stompfast.AsyncConsumer` does (ack when the handler returns, ``on_error``
when it raises). The threads take messages straight from the subscription's
buffer (no hop into the event loop per message); an idle thread looks for a
stop request every quarter second. :meth:`Consumer.drain` stops taking, joins
the threads (bounded) and closes the subscription.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from typing import Any, Callable, List, Mapping, Optional

from ._consumer import ConsumerStats, Failure, Nack, OnError, failure_step, log_failure
from ._events import Message
from ._retry import FailureLog, RetryPolicy, dead_letter_headers
from ._sync_subscription import Subscription
from .errors import (
    ClientClosedError,
    ConfigurationError,
    LocalProtocolError,
    ReceiveTimeout,
    StaleMessageError,
    StompError,
)

__all__ = ["Consumer", "check_sync_handler"]

log = logging.getLogger("stompfast")

#: How often an idle consumer thread looks whether it should stop (seconds).
IDLE_CHECK = 0.25

#: The counts each thread keeps, in its own list, by these indexes.
_COUNTS = ("handled", "acked", "nacked", "failed", "stale", "retried", "dead_lettered")
_HANDLED, _ACKED, _NACKED, _FAILED, _STALE, _RETRIED, _DEAD_LETTERED = range(len(_COUNTS))


class Consumer:
    """A running :meth:`Client.consume`: threads handling one subscription's messages.

    ``consumer.drain(timeout)`` stops it gracefully and returns how many handlers
    had not finished; ``consumer.join(timeout)`` waits for it to stop (raising
    what stopped it: ``on_error="stop"`` or the connection failing for good);
    ``consumer.stats()`` counts.
    """

    def __init__(
        self,
        subscription: Subscription,
        handler: Callable[[Any], Any],
        *,
        concurrency: int,
        on_error: OnError,
        publish: Callable[[str, bytes, Mapping[str, str]], Any],
        settle_timeout: Optional[float],
    ) -> None:
        self.destination = subscription.destination
        #: the subscription the threads take from
        self.subscription = subscription
        self._handler = handler
        self.concurrency = concurrency
        self._on_error = on_error
        # publish(destination, body, headers): a SEND confirmed by its receipt (dead letters)
        self._publish = publish
        self._failures = FailureLog()
        self._settle_timeout = settle_timeout
        # auto mode: the broker needs no settle
        self._settles = subscription.ack_mode != "auto"
        # Stops every thread at once: no thread takes another message once set.
        self._stopping = threading.Event()
        # Each thread writes only its own slot of these two lists (so no lock is taken per
        # message); stats() and wedged() read them from any thread. When each thread's
        # running handler started (time.monotonic), 0.0 while it has none:
        self._started: List[float] = [0.0] * concurrency
        # Each thread's counts, indexed as _COUNTS:
        self._tallies: List[List[int]] = [[0] * len(_COUNTS) for _ in range(concurrency)]
        # Guards _error, which a thread or the caller may set.
        self._lock = threading.Lock()
        # What stopped the consumer.
        self._error: Optional[BaseException] = None
        self._threads: List[threading.Thread] = [
            threading.Thread(target=self._work, args=(number,), name=f"stompfast-consumer-{number}", daemon=True)
            for number in range(concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _work(self, number: int) -> None:
        next_buffered = self.subscription.next_buffered
        receive = self.subscription.receive
        handler = self._handler
        stopping = self._stopping
        started = self._started
        tally = self._tallies[number]
        settles = self._settles
        timeout = self._settle_timeout
        monotonic = time.monotonic
        while not stopping.is_set():
            # The common case first: a buffered message is taken without a wait.
            message = next_buffered()
            if message is None:
                try:
                    message = receive(timeout=IDLE_CHECK)
                except ReceiveTimeout:
                    continue
                except ClientClosedError:
                    return
                except StompError as exc:
                    self.stop_taking(exc)
                    return
            tally[_HANDLED] += 1
            started[number] = monotonic()
            try:
                handler(message)
            except Exception as exc:
                self._handle_failure(Failure(message, exc), tally)
            else:
                if settles:
                    # The common case, inlined: a returned handler acks.
                    try:
                        message.ack(timeout=timeout)
                        tally[_ACKED] += 1
                    except Exception as exc:
                        self._settle_failed(message, "ack", exc, tally)
            finally:
                started[number] = 0.0

    def _handle_failure(self, failure: Failure, tally: List[int]) -> None:
        """The handler raised: retry the message, dead-letter it, settle it or stop, as ``on_error`` says."""
        while True:
            tally[_FAILED] += 1
            step, detail = failure_step(self._decide(failure), failure, self._settles)
            log_failure(self._failures, self.destination, failure, step, detail)
            if step != "retry":
                break
            if self._stopping.wait(detail):
                # Stopping: the message stays unacknowledged, and the broker redelivers it.
                return
            tally[_RETRIED] += 1
            failure.attempt += 1
            try:
                self._handler(failure.message)
            except Exception as exc:
                failure.error = exc
                continue
            if self._settles:
                self._settle(failure.message, "ack", None, tally)
            return
        if step == "dead-letter":
            self._dead_letter(failure, detail, tally)
        elif step == "stop":
            self.stop_taking(failure.error)
        elif step != "none":
            self._settle(failure.message, step, detail, tally)

    def _decide(self, failure: Failure) -> Any:
        """``on_error``'s decision for ``failure`` (a callable's answer; a callable that raises: retry)."""
        decision: Any = self._on_error
        if callable(decision) and not isinstance(decision, (Nack, RetryPolicy)):
            try:
                decision = decision(failure.message, failure.error)
            except Exception as hook_error:
                log.exception("stompfast: consume's on_error raised (the message is retried): %s", hook_error)
                decision = "retry"
        return decision

    def _dead_letter(self, failure: Failure, destination: str, tally: List[int]) -> None:
        """Publish a persistent copy to ``destination``, confirmed, then ack (as the async consumer does)."""
        message = failure.message
        headers = dead_letter_headers(message.headers, self.destination, failure.attempt, failure.error)
        try:
            self._publish(destination, message.body, headers)
        except StompError as exc:
            log.error(
                "stompfast: the dead letter of message %s on %r was not confirmed by the broker (%s): the message"
                " is left unacknowledged, for the broker to redeliver", message.message_id, self.destination, exc,
            )
            return
        tally[_DEAD_LETTERED] += 1
        if self._settles:
            self._settle(message, "ack", None, tally)

    def _settle(self, message: Message, command: str, headers: Optional[Mapping[str, Any]], tally: List[int]) -> None:
        try:
            if command == "ack":
                message.ack(headers=headers, timeout=self._settle_timeout)  # type: ignore[call-arg]
                tally[_ACKED] += 1
            else:
                message.nack(headers=headers, timeout=self._settle_timeout)  # type: ignore[call-arg]
                tally[_NACKED] += 1
        except Exception as exc:
            self._settle_failed(message, command, exc, tally)

    def _settle_failed(self, message: Message, command: str, exc: Exception, tally: List[int]) -> None:
        """An ACK or NACK refused: count it or log it; what the broker does with the message decides."""
        if isinstance(exc, StaleMessageError):
            tally[_STALE] += 1
        elif isinstance(exc, LocalProtocolError):
            # NACK on a STOMP 1.0 session, or a subscription gone: unsettled, redelivered.
            log.warning("stompfast: %s of a message on %r not sent: %s", command.upper(), self.destination, exc)
        elif isinstance(exc, ClientClosedError):
            pass
        elif isinstance(exc, StompError):
            tally[_STALE] += 1
        else:
            raise exc

    def stop_taking(self, error: Optional[BaseException] = None) -> None:
        """No thread takes another message (the running handlers go on); any thread."""
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
        self._stopping.set()

    def stats(self) -> ConsumerStats:
        """A snapshot of the counts (see :class:`~stompfast.ConsumerStats`); any thread."""
        counts = [sum(column) for column in zip(*[list(tally) for tally in self._tallies])]
        started = [since for since in list(self._started) if since]
        oldest = time.monotonic() - min(started) if started else 0.0
        return ConsumerStats(running=len(started), oldest_running=oldest, **dict(zip(_COUNTS, counts)))

    def wedged(self, limit: float) -> int:
        """How many handlers have been running for more than ``limit`` seconds."""
        now = time.monotonic()
        return sum(1 for since in list(self._started) if since and now - since > limit)

    @property
    def running(self) -> bool:
        """Some thread still runs."""
        return any(thread.is_alive() for thread in self._threads)

    def drain(self, timeout: Optional[float] = None) -> int:
        """Stop taking messages, let the running handlers finish and settle, close the subscription.

        Waits at most ``timeout`` seconds (None: as long as it takes) for the
        running handlers; returns how many had not finished (their messages stay
        unsettled: the broker redelivers them). Buffered messages never handed
        to a handler stay unsettled too. Not from a handler of this consumer.
        """
        self.stop_taking()
        self.wait_stopped(timeout)
        unfinished = sum(1 for since in list(self._started) if since)
        self.subscription.close()
        return unfinished

    def stop(self) -> None:
        """Stop now: close the subscription (running handlers go on, but cannot settle)."""
        self.stop_taking()
        self.subscription.close()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for every thread to stop; raise what stopped the consumer, if anything did."""
        self.wait_stopped(timeout)
        if self._error is not None:
            raise self._error

    def wait_stopped(self, timeout: Optional[float]) -> None:
        """Wait up to ``timeout`` seconds (None: for ever) for every thread to return; raise nothing."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        for thread in self._threads:
            if thread is current:
                continue
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def __repr__(self) -> str:
        state = "running" if self.running and not self._stopping.is_set() else (
            "draining" if self.running else "stopped"
        )
        return f"<Consumer {self.destination!r} concurrency={self.concurrency} {state}>"


def check_sync_handler(handler: Any) -> None:
    """The blocking client's handlers are plain callables, run in its threads."""
    if not callable(handler):
        raise ConfigurationError(f"handler must be callable, not {handler!r}")
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__):
        raise ConfigurationError(
            "handler is an async function: the blocking client runs plain functions in threads"
            " (use AsyncClient.consume for async handlers)"
        )
