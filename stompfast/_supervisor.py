"""The reconnect supervisor of :class:`~stompfast.AsyncClient`: try the broker list, re-establish lost sessions.

:meth:`Supervisor.establish` tries each broker of the list until one answers
CONNECTED, per the :class:`~stompfast.ReconnectPolicy` (attempt limits, backoff
with jitter). When the client's link fails with a retryable error, the client
closes it and hands what was lost to :meth:`Supervisor.link_lost`, which wakes
:meth:`Supervisor.run`: it waits the backoff and establishes a new link; sends
wait meanwhile (:meth:`Supervisor.wait_up`). Every step is reported through
``on_event`` and the ``stompfast.client`` / ``stompfast.reconnect`` loggers.

The supervisor owns the reconnect state (the loss it was woken for, the
"connection is up" events, the streak of failed attempts) and acts on the
client only through the three callables it is built with.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import anyio
import anyio.lowlevel

from ._common import RETRYABLE, conn_log, describe_error, log, reconnect_log, where
from ._config import Endpoint
from ._link import Link, Lost
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._stats import Counters
from .errors import ClientClosedError, ConnectError

__all__ = ["Supervisor"]


def log_event(kind: str, endpoint: Optional[Endpoint], protocol: Any, fields: Dict[str, Any]) -> None:
    """Log a connection event (the on_event hook's, also without a hook): what operators look for."""
    error = fields.get("error")
    if kind == "connected":
        if conn_log.isEnabledFor(logging.INFO):
            conn_log.info(
                "%s %s (STOMP %s, server %s)", "reconnected to" if fields.get("reconnected") else "connected to",
                where(endpoint), protocol.version, protocol.server or "unnamed",
            )
    elif kind == "connecting":
        conn_log.debug("connecting to %s (attempt %s)", where(endpoint), fields.get("attempt"))
    elif kind == "connect_failed":
        conn_log.warning("could not connect to %s: %s", where(endpoint), describe_error(error))
    elif kind == "disconnected":
        conn_log.warning(
            "connection to %s lost after %.1f s: %s (%d queued frame(s) and %d buffered message(s) dropped,"
            " %d transaction(s) aborted)", where(endpoint), fields.get("uptime", 0.0), describe_error(error),
            fields.get("dropped_frames", 0), fields.get("dropped_messages", 0), fields.get("aborted_transactions", 0),
        )
    elif kind == "reconnecting":
        reconnect_log.info("reconnecting in %.2f s (attempt %s)", fields.get("delay", 0.0), fields.get("attempt"))
    elif kind == "gave_up":
        reconnect_log.error("gave up reconnecting: %s", describe_error(error))


class Supervisor:
    """Connect and reconnect one client per its policy.

    Args:
        endpoints: the brokers to try, in order.
        policy: the client's reconnect policy.
        on_event: the client's ``on_event`` hook (or None).
        counters: the client's counters (``reconnects``).
        connect: ``connect(endpoint, first)`` opens a link to ``endpoint``, makes it
            the client's, and on a reconnect (``first`` false) re-subscribes.
        reopened: called once a lost session is re-established; False when the
            client began to close meanwhile (it owns the teardown then).
        give_up: called with the last error when no attempt is left.
    """

    __slots__ = (
        "endpoints", "policy", "on_event", "counters", "connect", "reopened", "give_up", "lost", "loss",
        "up", "next_up", "up_since", "scope",
    )

    def __init__(
        self,
        endpoints: Tuple[Endpoint, ...],
        policy: ReconnectPolicy,
        on_event: Optional[Callable[[ConnectionEvent], Any]],
        *,
        counters: Counters,
        connect: Callable[[Endpoint, bool], Awaitable[Link]],
        reopened: Callable[[], bool],
        give_up: Callable[[BaseException], None],
    ) -> None:
        self.endpoints = endpoints
        self.policy = policy
        self.on_event = on_event
        self.counters = counters
        self.connect = connect
        self.reopened = reopened
        self.give_up = give_up
        # Set when the current link is lost; a new one per link.
        self.lost: Optional[anyio.Event] = None
        # The lost link and what it lost, for run() (None once reported).
        self.loss: Optional[Tuple[Link, Lost]] = None
        # Set while a link is up: senders waiting for a reconnect wait on it.
        self.up: Optional[anyio.Event] = None
        # Becomes ``up`` when the current link is lost.
        self.next_up: Optional[anyio.Event] = None
        # When the current session came up (anyio clock).
        self.up_since = 0.0
        # The cancel scope of run() (None when reconnecting is off or run() never started).
        self.scope: Optional[anyio.CancelScope] = None

    def attach(self) -> None:
        """A new link is up: its loss is news again; the next loss swaps in a fresh 'up' event."""
        self.lost = anyio.Event()
        self.next_up = anyio.Event()
        if self.up is None:
            self.up = anyio.Event()

    def emit(self, kind: str, endpoint: Optional[Endpoint], protocol: Any = None, **fields: Any) -> None:
        """Report a connection event to the loggers and the ``on_event`` hook (what the hook raises is logged)."""
        log_event(kind, endpoint, protocol, fields)
        if self.on_event is None:
            return
        try:
            self.on_event(ConnectionEvent(kind, endpoint.url if endpoint is not None else None, **fields))
        except Exception:
            log.exception("stompfast: the on_event hook raised (ignored)")

    async def establish(self, *, first: bool, streak: int = 0) -> int:
        """Try the broker list until one answers CONNECTED, per the reconnect policy.

        ``streak`` counts the failures before this call that the backoff goes on
        from (sessions that died young; see ``ReconnectPolicy.stable_after``);
        only this call's own failures count toward the attempt limit. Returns
        the streak when a broker answered: ``streak`` plus this call's failures.
        """
        policy = self.policy
        limit = policy.connect_attempts if first else policy.max_attempts
        failed = 0
        while True:
            endpoints = list(self.endpoints)
            if policy.randomize and len(endpoints) > 1:
                random.shuffle(endpoints)
            errors: List[Tuple[Endpoint, BaseException]] = []
            for endpoint in endpoints:
                self.emit("connecting", endpoint, attempt=failed + 1)
                try:
                    link = await self.connect(endpoint, first)
                except RETRYABLE as exc:
                    errors.append((endpoint, exc))
                    self.emit("connect_failed", endpoint, attempt=failed + 1, error=exc)
                    continue
                self.up_since = anyio.current_time()
                self.emit("connected", endpoint, link.protocol, attempt=failed + 1, reconnected=not first)
                return streak + failed
            failed += 1
            if limit is not None and failed >= limit:
                if len(errors) == 1:
                    raise errors[0][1]
                summary = "; ".join(f"{ep.url}: {exc}" for ep, exc in errors)
                raise ConnectError(f"no broker of {len(errors)} could be used: {summary}") from errors[-1][1]
            # run() slept delay(streak + 1) before this call
            delay = policy.delay(failed if first else streak + failed + 1)
            self.emit("reconnecting", None, attempt=failed + 1, delay=delay, error=errors[-1][1])
            await anyio.sleep(delay)

    def link_lost(self, link: Link, lost: Lost, *, was_up: bool) -> None:
        """``link`` failed and was closed, having lost ``lost``: wake :meth:`run` to re-establish it.

        ``was_up``: the client was open (not confirming a reconnect already), so
        senders wait from now on for the next link.
        """
        if was_up:
            self.up = self.next_up
        self.loss = (link, lost)
        if self.lost is not None:
            self.lost.set()

    async def run(self) -> None:
        """Wait for the link to fail; re-establish it; repeat (runs while the client is open)."""
        # failed attempts in a row, sessions shorter than stable_after included
        streak = 0
        while True:
            lost = self.lost
            assert lost is not None
            await lost.wait()
            assert self.loss is not None
            link, loss = self.loss
            self.loss = None
            await link.aclose()
            uptime = anyio.current_time() - self.up_since
            self.emit(
                "disconnected",
                link.endpoint,
                error=loss.error,
                dropped_frames=loss.dropped_frames,
                dropped_messages=loss.dropped_messages,
                aborted_transactions=loss.aborted_transactions,
                uptime=uptime,
            )
            policy = self.policy
            # A session that died young is one more failed attempt for the backoff,
            # not a fresh start: a flapping broker sees the delay grow to max_delay.
            # (The first session came from connect(), not from an attempt of ours.)
            streak = streak + 1 if uptime < policy.stable_after and self.counters.reconnects else 0
            delay = policy.delay(streak + 1)
            self.emit("reconnecting", None, attempt=streak + 1, delay=delay, error=loss.error)
            # Nothing of a lost connection is kept while the next one runs.
            del link, loss
            await anyio.sleep(delay)
            try:
                streak = await self.establish(first=False, streak=streak)
            except ClientClosedError:
                # closed while re-establishing (e.g. waiting for the re-sent SUBSCRIBEs)
                return
            except RETRYABLE as exc:
                self.emit("gave_up", None, error=exc)
                self.give_up(exc)
                self.stop()
                return
            self.counters.reconnects += 1
            if not self.reopened():
                return
            up = self.up
            if up is not None:
                up.set()

    def start(self, tg: Any) -> None:
        """Run :meth:`run` in ``tg`` under a cancel scope of its own (:meth:`stop` cancels it)."""
        scope = self.scope = anyio.CancelScope()

        async def supervise() -> None:
            with scope:
                await self.run()

        tg.start_soon(supervise, name="stompfast-reconnect")

    def stop(self) -> None:
        """The client failed for good or closes: no more reconnecting, and senders waiting for a link wake."""
        if self.scope is not None:
            self.scope.cancel()
        if self.up is not None:
            self.up.set()

    async def wait_up(self) -> None:
        """Wait until the link being re-established is up (or the client failed or closed)."""
        up = self.up
        assert up is not None
        await up.wait()
