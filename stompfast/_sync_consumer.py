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
from typing import Any, Callable, Dict, List, Mapping, Optional

from ._consumer import ConsumerStats, Nack, OnError, error_action
from ._events import Message
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
        settle_timeout: Optional[float],
    ) -> None:
        self.destination = subscription.destination
        #: the subscription the threads take from
        self.subscription = subscription
        self._handler = handler
        self.concurrency = concurrency
        self._on_error = on_error
        self._settle_timeout = settle_timeout
        # auto mode: the broker needs no settle
        self._settles = subscription.ack_mode != "auto"
        # Guards the counts and the running handlers' start times (the threads write them).
        self._lock = threading.Lock()
        # No thread takes another message once set.
        self._stopping = threading.Event()
        # When each running handler started (time.monotonic), by thread number.
        self._started: Dict[int, float] = {}
        # What stopped the consumer.
        self._error: Optional[BaseException] = None
        self._counts = {"handled": 0, "acked": 0, "nacked": 0, "failed": 0, "stale": 0}
        self._threads: List[threading.Thread] = [
            threading.Thread(target=self._work, args=(number,), name=f"stompfast-consumer-{number}", daemon=True)
            for number in range(concurrency)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _work(self, number: int) -> None:
        sub = self.subscription
        handler = self._handler
        while not self._stopping.is_set():
            try:
                message = sub.receive(timeout=IDLE_CHECK)
            except ReceiveTimeout:
                continue
            except ClientClosedError:
                return
            except StompError as exc:
                self.stop_taking(exc)
                return
            with self._lock:
                self._counts["handled"] += 1
                self._started[number] = time.monotonic()
            try:
                handler(message)
            except Exception as exc:
                self._count("failed")
                self._handle_error(message, exc)
            else:
                if self._settles:
                    self._settle(message, "ack", None)
            finally:
                with self._lock:
                    del self._started[number]

    def _handle_error(self, message: Message, exc: Exception) -> None:
        decision: Any = self._on_error
        if callable(decision) and not isinstance(decision, Nack):
            try:
                decision = decision(message, exc)
            except Exception as hook_error:
                log.exception("stompfast: consume's on_error raised (the message is nacked): %s", hook_error)
                decision = "nack"
        action, headers = error_action(decision, self._settles, self.destination, exc)
        if action == "stop":
            self.stop_taking(exc)
        elif action != "none":
            self._settle(message, action, headers)

    def _settle(self, message: Message, command: str, headers: Optional[Mapping[str, Any]]) -> None:
        try:
            if command == "ack":
                message.ack(headers=headers, timeout=self._settle_timeout)  # type: ignore[call-arg]
                self._count("acked")
            else:
                message.nack(headers=headers, timeout=self._settle_timeout)  # type: ignore[call-arg]
                self._count("nacked")
        except StaleMessageError:
            self._count("stale")
        except LocalProtocolError as exc:
            # NACK on a STOMP 1.0 session, or a subscription gone: unsettled, redelivered.
            log.warning("stompfast: %s of a message on %r not sent: %s", command.upper(), self.destination, exc)
        except ClientClosedError:
            pass
        except StompError:
            self._count("stale")

    def stop_taking(self, error: Optional[BaseException] = None) -> None:
        """No thread takes another message (the running handlers go on); any thread."""
        with self._lock:
            if error is not None and self._error is None:
                self._error = error
        self._stopping.set()

    def stats(self) -> ConsumerStats:
        """A snapshot of the counts (see :class:`~stompfast.ConsumerStats`); any thread."""
        with self._lock:
            counts = dict(self._counts)
            started = list(self._started.values())
        oldest = time.monotonic() - min(started) if started else 0.0
        return ConsumerStats(running=len(started), oldest_running=oldest, **counts)

    def wedged(self, limit: float) -> int:
        """How many handlers have been running for more than ``limit`` seconds."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for since in self._started.values() if now - since > limit)

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
        with self._lock:
            unfinished = len(self._started)
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
