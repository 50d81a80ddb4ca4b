"""Handler consumption: ``await client.consume(destination, handler, concurrency=N)``.

An :class:`AsyncConsumer` runs ``concurrency`` worker tasks in the client's task
group over one subscription. Each worker takes a message, awaits
``handler(message)`` and settles it: a handler that returns acks it, one that
raises is dealt with as ``on_error`` says: by default retried after a growing
delay and at last dead-lettered, the same on every broker (:mod:`._retry`), or
acked, nacked or left for a stop. With ``concurrency=1``
one worker handles the messages in the order they came. The subscription's
buffer, and so the broker's prefetch in the client ack modes, follows
``concurrency`` (``prefetch``, twice the workers by default): the broker keeps
what no worker could take soon, for other consumers to have.

A reconnect does not stop a consumer: the subscription is re-established with
the link, and a handler still running on a message of the lost link finds it
stale when it settles (counted as ``stale``; the broker redelivers it).

:meth:`AsyncConsumer.drain` stops it gracefully: no worker takes another
message, the running handlers finish and settle (bounded), then the subscription
is closed; what was buffered and never handed to a handler is unacked, and the
broker redelivers it. The workers' own state is here; the client only keeps the
set of its consumers (for ``health()`` and ``client.drain()``).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, List, Mapping, Optional, Set, Tuple, Union

import anyio
import anyio.abc

from ._brokers import NACK_LOSES
from ._events import Message
from ._retry import FailureLog, RetryPolicy, dead_letter_headers
from ._subscription import AsyncSubscription
from .errors import ClientClosedError, ConfigurationError, LocalProtocolError, StaleMessageError, StompError

__all__ = [
    "AsyncConsumer", "ConsumerSet", "ConsumerStats", "Failure", "Nack", "check_consume_options", "failure_step",
    "warn_if_nack_loses",
]

log = logging.getLogger("stompfast")

#: What ``on_error`` may say about a message whose handler raised.
ERROR_DECISIONS = ("retry", "dead-letter", "nack", "ack", "stop")


@dataclass(frozen=True)
class Nack:
    """``on_error``'s answer: NACK the message with these extra ``headers`` (e.g. ``{"requeue": "false"}``)."""

    headers: Mapping[str, Any] = field(default_factory=dict)


#: ``on_error``: a decision for every failure, or ``on_error(message, exc)`` returning one (or awaiting one).
OnError = Union[str, RetryPolicy, Nack, Callable[[Message, Exception], Any]]

#: What ``"retry"`` means, and ``consume``'s default ``on_error``.
DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class ConsumerStats:
    """What a consumer did so far (``consumer.stats()``)."""

    #: messages handed to the handler (a retried message counts once)
    handled: int = 0
    #: messages acked after their handler returned (or raised, with ``on_error="ack"``)
    acked: int = 0
    #: messages nacked after their handler raised (``on_error="nack"`` or a ``Nack``)
    nacked: int = 0
    #: handler calls that raised (each attempt of a retried message counts)
    failed: int = 0
    #: settles refused because the message came on a connection that was lost (the broker redelivers it)
    stale: int = 0
    #: handlers running now
    running: int = 0
    #: seconds the longest-running handler has been running (0.0 when none runs)
    oldest_running: float = 0.0
    #: handler calls that were a retry of a failed one
    retried: int = 0
    #: messages published to a dead-letter destination (and then acked)
    dead_lettered: int = 0


def check_consume_options(concurrency: Any, prefetch: Any, ack: str, on_error: Any) -> int:
    """Refuse bad ``consume`` options before anything is sent; return the prefetch to use."""
    if type(concurrency) is not int or concurrency < 1:
        raise ConfigurationError(f"concurrency must be a positive int, not {concurrency!r}")
    if prefetch is None:
        prefetch = 2 * concurrency
    if type(prefetch) is not int or prefetch < concurrency:
        raise ConfigurationError(f"prefetch must be an int of at least concurrency ({concurrency}), not {prefetch!r}")
    if ack not in ("auto", "client", "client-individual"):
        raise ConfigurationError(f"ack must be 'auto', 'client' or 'client-individual', not {ack!r}")
    if ack == "client" and concurrency > 1:
        # A cumulative ACK of one worker's message would settle the messages other
        # workers are still handling.
        raise ConfigurationError("ack='client' (cumulative) cannot be used with concurrency > 1: use client-individual")
    if not (isinstance(on_error, (Nack, RetryPolicy)) or callable(on_error) or on_error in ERROR_DECISIONS):
        raise ConfigurationError(
            "on_error must be 'retry', 'dead-letter', 'nack', 'ack', 'stop', a RetryPolicy, a Nack(headers)"
            f" or a callable, not {on_error!r}"
        )
    return prefetch


def warn_if_nack_loses(on_error: Any, broker: Optional[str], destination: str) -> None:
    """Say once, at the start, that the broker's NACK ``on_error`` asks for loses the message there."""
    if (on_error == "nack" or isinstance(on_error, Nack)) and broker in NACK_LOSES:
        log.warning(
            "stompfast: consume(%r, on_error=%r): %s; the default, RetryPolicy(), retries and then dead-letters"
            " instead (docs/brokers.md, NACK and redelivery)", destination, on_error, NACK_LOSES[broker],
        )


class Failure:
    """One message's failures: which call this was, and the last error (a retried message keeps its own)."""

    __slots__ = ("message", "error", "attempt")

    def __init__(self, message: Message, error: Exception) -> None:
        self.message = message
        self.error = error
        #: the handler call that raised (1: the first)
        self.attempt = 1


def failure_step(decision: Any, failure: Failure, settles: bool) -> Tuple[str, Any]:
    """What comes after ``failure``, by ``on_error``'s ``decision``: ``(step, detail)``.

    ``("retry", seconds)``: call the handler again after that delay;
    ``("dead-letter", destination)``: publish a persistent copy there, then ack;
    ``("ack", None)``; ``("nack", headers or None)``; ``("stop", None)``: leave the
    message unsettled and stop the consumer; ``("none", None)``: ``auto`` mode,
    nothing to settle. A decision that is none of those is logged and retried
    by the default policy. Both consumers (tasks and threads) act on this.
    """
    if decision == "retry":
        decision = DEFAULT_RETRY
    elif decision == "dead-letter":
        return "dead-letter", DEFAULT_RETRY.dead_letter_for(failure.message.destination or "")
    elif decision == "stop":
        return "stop", None
    elif decision in ("ack", "nack") or isinstance(decision, Nack):
        if not settles:
            return "none", None
        if decision == "ack":
            return "ack", None
        return "nack", (decision.headers or None) if isinstance(decision, Nack) else None
    elif not isinstance(decision, RetryPolicy):
        log.error(
            "stompfast: consume's on_error returned %r (not 'retry', 'dead-letter', 'ack', 'nack', 'stop', a"
            " RetryPolicy or a Nack): the message is retried by the default policy", decision,
        )
        decision = DEFAULT_RETRY
    if failure.attempt < decision.attempts:
        return "retry", decision.delay_after(failure.attempt)
    return "dead-letter", decision.dead_letter_for(failure.message.destination or "")


def log_failure(failures: FailureLog, destination: str, failure: Failure, step: str, detail: Any) -> None:
    """Log a handler failure and what is done about it (rate-limited by ``failures``)."""
    message = failure.message
    where = (destination, message.message_id, failure.attempt)
    if step == "retry":
        failures.failure(logging.WARNING, "stompfast: handler on %r failed (message %s, attempt %d); retrying in"
                         " %.2f s", *where, detail, error=failure.error)
    elif step == "dead-letter":
        failures.failure(logging.ERROR, "stompfast: handler on %r failed (message %s, attempt %d); dead-lettering"
                         " it to %r", *where, detail, error=failure.error)
    elif step == "stop":
        failures.failure(logging.ERROR, "stompfast: handler on %r failed (message %s, attempt %d); on_error says"
                         " stop: the message is left unacknowledged", *where, error=failure.error)
    elif step == "none":
        failures.failure(logging.WARNING, "stompfast: handler on %r failed (message %s, attempt %d); ack mode auto:"
                         " the broker took it as delivered", *where, error=failure.error)
    else:
        failures.failure(logging.WARNING, "stompfast: handler on %r failed (message %s, attempt %d); %s it, as"
                         " on_error says", *where, "acking" if step == "ack" else "nacking", error=failure.error)


class AsyncConsumer:
    """A running :meth:`AsyncClient.consume`: workers handling one subscription's messages.

    ``await consumer.drain(timeout)`` stops it gracefully and returns what it
    could not finish; ``await consumer.wait()`` returns when it stopped (raising
    what stopped it, if anything did: ``on_error="stop"``, or the connection
    failing for good); ``consumer.stats()`` counts.
    """

    __slots__ = (
        "destination", "subscription", "handler", "concurrency", "on_error", "publish", "settles", "clock",
        "stopping", "pauses", "started", "workers_left", "done", "error", "failures", "handled", "acked",
        "nacked", "failed", "stale", "retried", "dead_lettered",
    )

    def __init__(
        self,
        subscription: AsyncSubscription,
        handler: Callable[[Message], Awaitable[Any]],
        *,
        concurrency: int,
        on_error: OnError,
        publish: Callable[[str, bytes, Mapping[str, str]], Awaitable[Any]],
        clock: Callable[[], float],
    ) -> None:
        self.destination = subscription.destination
        #: the subscription the workers take from (open: entered by ``consume``)
        self.subscription = subscription
        self.handler = handler
        self.concurrency = concurrency
        self.on_error = on_error
        #: ``await publish(destination, body, headers)``: a SEND confirmed by its receipt (dead letters)
        self.publish = publish
        # auto mode: the broker needs no settle
        self.settles = subscription.ack_mode != "auto"
        self.clock = clock
        # No worker takes another message once this is set (drain, stop, a failure).
        self.stopping = False
        # The cancel scopes of the retry delays being waited out: a stop cancels them
        # (a scope and a sleep cost a third of a deadline scope around an event's wait).
        self.pauses: Set[anyio.CancelScope] = set()
        # When each worker's running handler started (by ``clock``), 0.0 while it waits.
        self.started: List[float] = [0.0] * concurrency
        self.workers_left = concurrency
        # Set once every worker has returned.
        self.done = anyio.Event()
        # What stopped the consumer (on_error="stop", or the connection failing for good).
        self.error: Optional[BaseException] = None
        self.failures = FailureLog()
        self.handled = 0
        self.acked = 0
        self.nacked = 0
        self.failed = 0
        self.stale = 0
        self.retried = 0
        self.dead_lettered = 0

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the workers in ``tg`` (the client's task group)."""
        for number in range(self.concurrency):
            tg.start_soon(self._worker, number, name=f"stompfast-consumer-{self.destination}-{number}")

    async def _worker(self, number: int) -> None:
        next_buffered = self.subscription.next_buffered
        handler = self.handler
        started = self.started
        clock = self.clock
        settles = self.settles
        try:
            while not self.stopping:
                # The common case first: a buffered message is taken without a wait.
                message = next_buffered()
                if message is None:
                    if not await self._wait_for_message():
                        return
                    continue
                self.handled += 1
                started[number] = clock()
                try:
                    await handler(message)
                except Exception as exc:
                    await self._handle_failure(Failure(message, exc))
                else:
                    if settles:
                        # _settle's ACK inlined: this runs once per message
                        try:
                            await message.ack()
                            self.acked += 1
                        except StompError as exc:
                            self._settle_failed("ack", exc)
                finally:
                    started[number] = 0.0
        finally:
            self.workers_left -= 1
            if not self.workers_left:
                self.done.set()

    async def _wait_for_message(self) -> bool:
        """Wait until a message is buffered or the consumer is told to stop; False: stop now."""
        try:
            await self.subscription.wait_buffered()
        except ClientClosedError:
            # The subscription was closed (drain, or the client closing): no error of ours.
            self.stop_taking()
            return False
        except StompError as exc:
            # The connection failed for good: every worker stops with it.
            self.stop_taking(exc)
            return False
        return True

    async def _handle_failure(self, failure: Failure) -> None:
        """The handler raised: retry the message, dead-letter it, settle it or stop, as ``on_error`` says."""
        while True:
            self.failed += 1
            step, detail = failure_step(await self._decide(failure), failure, self.settles)
            log_failure(self.failures, self.destination, failure, step, detail)
            if step != "retry":
                break
            if not await self._pause(detail):
                # Stopping: the message stays unacknowledged, and the broker redelivers it.
                return
            self.retried += 1
            failure.attempt += 1
            try:
                await self.handler(failure.message)
            except Exception as exc:
                failure.error = exc
                continue
            if self.settles:
                await self._settle(failure.message, "ack", None)
            return
        if step == "dead-letter":
            await self._dead_letter(failure, detail)
        elif step == "stop":
            self.stop_taking(failure.error)
        elif step != "none":
            await self._settle(failure.message, step, detail)

    async def _decide(self, failure: Failure) -> Any:
        """``on_error``'s decision for ``failure`` (a callable's answer; a callable that raises: retry)."""
        decision: Any = self.on_error
        if callable(decision) and not isinstance(decision, (Nack, RetryPolicy)):
            try:
                decision = decision(failure.message, failure.error)
                if inspect.isawaitable(decision):
                    decision = await decision
            except Exception as hook_error:
                log.exception("stompfast: consume's on_error raised (the message is retried): %s", hook_error)
                decision = "retry"
        return decision

    async def _pause(self, delay: float) -> bool:
        """Wait ``delay`` seconds before a retry; False if the consumer was told to stop meanwhile."""
        with anyio.CancelScope() as scope:
            self.pauses.add(scope)
            try:
                await anyio.sleep(delay)
            finally:
                self.pauses.discard(scope)
        return not self.stopping

    async def _dead_letter(self, failure: Failure, destination: str) -> None:
        """Publish a persistent copy of the message to ``destination``, confirmed, and only then ack it.

        A crash or a lost connection between the two leaves the original
        unacknowledged: the broker redelivers it (a duplicate dead letter at
        worst, never a loss). A refused publish leaves it unacknowledged too.
        """
        message = failure.message
        headers = dead_letter_headers(message.headers, self.destination, failure.attempt, failure.error)
        try:
            await self.publish(destination, message.body, headers)
        except StompError as exc:
            log.error(
                "stompfast: the dead letter of message %s on %r was not confirmed by the broker (%s): the message"
                " is left unacknowledged, for the broker to redeliver", message.message_id, self.destination, exc,
            )
            return
        self.dead_lettered += 1
        if self.settles:
            await self._settle(message, "ack", None)

    async def _settle(self, message: Message, command: str, headers: Optional[Mapping[str, Any]]) -> None:
        try:
            if command == "ack":
                await message.ack(headers=headers) if headers else await message.ack()
                self.acked += 1
            else:
                await message.nack(headers=headers)
                self.nacked += 1
        except StompError as exc:
            self._settle_failed(command, exc)

    def _settle_failed(self, command: str, exc: StompError) -> None:
        """An ACK or NACK was refused: count or report it (the message stays unsettled: redelivered)."""
        if isinstance(exc, StaleMessageError):
            self.stale += 1
        elif isinstance(exc, LocalProtocolError):
            # NACK on a STOMP 1.0 session, or a subscription gone (the client closing)
            log.warning("stompfast: %s of a message on %r not sent: %s", command.upper(), self.destination, exc)
        elif not isinstance(exc, ClientClosedError):
            # The connection failed meanwhile: a reconnect is under way (the message is
            # stale then) or the client failed for good (the workers stop at their next wait).
            self.stale += 1

    def stop_taking(self, error: Optional[BaseException] = None) -> None:
        """No worker takes another message; the waiting ones return now (the running handlers go on)."""
        if error is not None and self.error is None:
            self.error = error
        self.stopping = True
        for scope in list(self.pauses):
            scope.cancel()
        # The waiting workers see ``stopping`` as they wake.
        self.subscription.wake()

    @property
    def running(self) -> int:
        """Handlers running now."""
        return sum(1 for since in self.started if since)

    def stats(self) -> ConsumerStats:
        """A snapshot of the counts (see :class:`ConsumerStats`)."""
        started = [since for since in self.started if since]
        oldest = self.clock() - min(started) if started else 0.0
        return ConsumerStats(
            handled=self.handled, acked=self.acked, nacked=self.nacked, failed=self.failed, stale=self.stale,
            running=len(started), oldest_running=oldest, retried=self.retried, dead_lettered=self.dead_lettered,
        )

    def wedged(self, limit: float) -> int:
        """How many handlers have been running for more than ``limit`` seconds."""
        now = self.clock()
        return sum(1 for since in self.started if since and now - since > limit)

    async def drain(self, timeout: float = math.inf) -> int:
        """Stop taking messages, let the running handlers finish and settle, close the subscription.

        Waits at most ``timeout`` seconds for the running handlers; returns how many
        had not finished by then (their messages stay unsettled: the broker
        redelivers them once the subscription or the connection is gone).
        Messages buffered and never handed to a handler are left unsettled too.
        """
        self.stop_taking()
        with anyio.move_on_after(timeout):
            await self.done.wait()
        unfinished = self.running
        with anyio.CancelScope(shield=True):
            await self.subscription.aclose()
        return unfinished

    async def stop(self) -> None:
        """Stop now: close the subscription (running handlers go on, but cannot settle)."""
        self.stop_taking()
        await self.subscription.aclose()

    async def wait(self) -> None:
        """Return when every worker stopped; raise what stopped the consumer, if anything did."""
        await self.done.wait()
        if self.error is not None:
            raise self.error

    def __repr__(self) -> str:
        state = "stopped" if self.done.is_set() else ("draining" if self.stopping else "running")
        return (
            f"<AsyncConsumer {self.destination!r} concurrency={self.concurrency} {state}"
            f" handled={self.handled} running={self.running}>"
        )



class ConsumerSet:
    """A client's consumers (its ``consume()`` calls): what ``health()`` looks at and ``drain()`` finishes."""

    __slots__ = ("_consumers",)

    def __init__(self) -> None:
        self._consumers: Set[AsyncConsumer] = set()

    async def open(
        self,
        subscribe: Callable[..., AsyncSubscription],
        broker: Callable[[], Optional[str]],
        publish: Callable[[str, bytes, Mapping[str, str]], Awaitable[Any]],
        destination: str,
        handler: Callable[[Message], Awaitable[Any]],
        *,
        concurrency: int,
        ack: str,
        on_error: OnError,
        prefetch: Optional[int],
        headers: Optional[Mapping[str, Any]],
        id: Optional[str],
        durable: Optional[str],
    ) -> AsyncConsumer:
        """``client.consume``'s checks and subscription: a consumer kept here, its workers not started yet.

        ``subscribe``, ``broker`` and ``publish`` are the client's (its ``subscribe``
        as the caller finds it, so that an instrumented one is used; the broker of
        its connection; a confirmed SEND for dead letters).
        """
        prefetch = check_consume_options(concurrency, prefetch, ack, on_error)
        # An async function, or an object whose __call__ is one
        if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)):
            raise ConfigurationError(f"handler must be an async function (async def), not {handler!r}")
        sub = subscribe(destination, ack=ack, headers=headers, buffer_size=prefetch, id=id, durable=durable)
        await sub.__aenter__()
        warn_if_nack_loses(on_error, broker(), destination)
        # The handlers' start times need only be comparable with each other: time.monotonic
        # is a C call, where the loop's clock is a Python method around it (once per message).
        consumer = AsyncConsumer(
            sub, handler, concurrency=concurrency, on_error=on_error, publish=publish, clock=time.monotonic
        )
        self.add(consumer)
        return consumer

    def add(self, consumer: AsyncConsumer) -> None:
        """Keep ``consumer`` (and forget the ones that are done)."""
        self._consumers = {c for c in self._consumers if not c.done.is_set()}
        self._consumers.add(consumer)

    def live(self) -> List[AsyncConsumer]:
        """The consumers not done yet."""
        return [c for c in self._consumers if not c.done.is_set()]

    def handlers(self, limit: float) -> Tuple[int, int]:
        """Handlers running now, and how many of them have run for more than ``limit`` seconds."""
        consumers = self.live()
        return sum(c.running for c in consumers), sum(c.wedged(limit) for c in consumers)

    async def finish(self, deadline: float) -> Tuple[int, int]:
        """Stop every consumer taking, let the running handlers finish, leave the subscriptions, by ``deadline``.

        Returns the handlers still unfinished at ``deadline`` and the messages buffered
        and never handled (UNSUBSCRIBE: the broker redelivers them). Leaving is
        shielded: a drain that is cancelled still leaves its subscriptions.
        """
        consumers = self.live()
        for consumer in consumers:
            consumer.stop_taking()
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            for consumer in consumers:
                await consumer.done.wait()
        unfinished = sum(c.running for c in consumers)
        unhandled = 0
        with anyio.CancelScope(shield=True):
            for consumer in consumers:
                unhandled += consumer.subscription.pending
                with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                    await consumer.subscription.aclose()
        return unfinished, unhandled
