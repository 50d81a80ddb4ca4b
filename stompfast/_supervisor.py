"""The reconnect supervisor of :class:`~stompfast.AsyncClient`: try the broker list, re-establish lost sessions.

``_establish`` tries each broker of the list until one answers CONNECTED, per
the :class:`~stompfast.ReconnectPolicy` (attempt limits, backoff with jitter).
When a link fails with a retryable error, ``_link_down`` cleans up what
belonged to it (pending receipts fail, unwritten frames and client-ack buffers
are dropped, transactions are told) and wakes ``_supervise``, which waits the
backoff and establishes a new link; sends wait meanwhile (``_ensure_open``).
Every step is reported through ``on_event`` and the ``stompfast.client`` /
``stompfast.reconnect`` loggers.

A mixin of the client (see docs/architecture.md).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import anyio
import anyio.lowlevel

from ._common import RETRYABLE, conn_log, log, reconnect_log, where
from ._config import Endpoint
from ._inbox import Inbox
from ._lifecycle import FAILED, OPEN, RECONNECTING, ClientState, advance
from ._outbox import Outbox
from ._protocol import StompProtocol
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._stats import Counters
from ._subscription import Inlet, LiveSession
from ._transport import StompTransport, describe_error
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


class Supervisor(Counters):
    """Connect and reconnect per the policy (a part of AsyncClient)."""

    # owns
    _policy: ReconnectPolicy
    _on_event: Optional[Callable[[ConnectionEvent], Any]]
    _lost: Optional[anyio.Event]
    _lost_info: Tuple[Any, ...]
    _up_event: Optional[anyio.Event]
    _next_up: Optional[anyio.Event]
    _up_since: float
    reconnects: int
    _link_alive: bool
    _live: LiveSession
    # reads
    _outbox: Outbox
    _inbox: Inbox
    endpoint: Endpoint
    endpoints: Tuple[Endpoint, ...]
    _protocol: StompProtocol
    _transport: Optional[StompTransport]
    _state: ClientState
    _error: Optional[BaseException]
    _subs: Dict[str, Inlet]

    if TYPE_CHECKING:  # provided by the client's other parts

        async def _open_link(self, endpoint: Endpoint, *, resubscribe: bool) -> None:
            raise NotImplementedError

        def _fail_receipts(self, error: BaseException) -> None:
            raise NotImplementedError

        def _stop_connection(self, *, release: bool) -> None:
            raise NotImplementedError

        def _check_open(self) -> None:
            raise NotImplementedError

        def _lose_transactions(self, error: BaseException) -> int:
            raise NotImplementedError

    def _attach_supervisor(self) -> None:
        """A new connection: its loss is news again; the next loss swaps in a fresh 'up' event."""
        self._lost = anyio.Event()
        self._next_up = anyio.Event()
        if self._up_event is None:
            self._up_event = anyio.Event()
        self._link_alive = True
        self._live.protocol = self._protocol  # acks of this session's messages may go out

    def _emit(self, kind: str, endpoint: Optional[Endpoint], **fields: Any) -> None:
        log_event(kind, endpoint, self._protocol, fields)
        if self._on_event is None:
            return
        try:
            self._on_event(ConnectionEvent(kind, endpoint.url if endpoint is not None else None, **fields))
        except Exception:
            log.exception("stompfast: the on_event hook raised (ignored)")

    async def _establish(self, *, first: bool, streak: int = 0) -> int:
        """Try the broker list until one answers CONNECTED, per the reconnect policy.

        ``streak`` counts the failures before this call that the backoff goes on
        from (sessions that died young; see ``ReconnectPolicy.stable_after``);
        only this call's own failures count toward the attempt limit. Returns
        the streak when a broker answered: ``streak`` plus this call's failures.
        """
        policy = self._policy
        limit = policy.connect_attempts if first else policy.max_attempts
        failed = 0
        while True:
            endpoints = list(self.endpoints)
            if policy.randomize and len(endpoints) > 1:
                random.shuffle(endpoints)
            errors: List[Tuple[Endpoint, BaseException]] = []
            for endpoint in endpoints:
                self._emit("connecting", endpoint, attempt=failed + 1)
                try:
                    await self._open_link(endpoint, resubscribe=not first)
                except RETRYABLE as exc:
                    errors.append((endpoint, exc))
                    self._emit("connect_failed", endpoint, attempt=failed + 1, error=exc)
                    continue
                self._up_since = anyio.current_time()
                self._emit("connected", endpoint, attempt=failed + 1, reconnected=not first)
                return streak + failed
            failed += 1
            if limit is not None and failed >= limit:
                if len(errors) == 1:
                    raise errors[0][1]
                summary = "; ".join(f"{ep.url}: {exc}" for ep, exc in errors)
                raise ConnectError(f"no broker of {len(errors)} could be used: {summary}") from errors[-1][1]
            delay = policy.delay(failed if first else streak + failed + 1)  # the supervisor slept delay(streak + 1)
            self._emit("reconnecting", None, attempt=failed + 1, delay=delay, error=errors[-1][1])
            await anyio.sleep(delay)

    def _link_down(self, error: BaseException) -> None:
        """The current connection failed but the client goes on: clean up, wake the supervisor.

        Pending receipts fail with ``error`` (never re-sent); queued frames that were
        never written are dropped; buffered messages of client-ack subscriptions
        are discarded (the broker redelivers them, and acking them on a new
        session would be wrong); open transactions are aborted and told.
        """
        if not self._link_alive:
            return
        self._link_alive = False
        self._live.protocol = None
        self._n_losses += 1
        if self._state is OPEN:
            self._state = advance(self._state, RECONNECTING)
            self._up_event = self._next_up
        self._fail_receipts(error)
        dropped_frames = self._outbox.drop()
        self._stop_connection(release=False)
        self._protocol.connection_lost()
        dropped_messages = self._inbox.drop()
        aborted = self._lose_transactions(error)
        self._lost_info = (error, dropped_frames, dropped_messages, aborted)
        if self._lost is not None:
            self._lost.set()

    async def _supervise(self) -> None:
        """Wait for the connection to fail; re-establish it; repeat (runs while the client is open)."""
        streak = 0  # failed attempts in a row, sessions shorter than stable_after included
        while True:
            lost = self._lost
            assert lost is not None
            await lost.wait()
            error, dropped_frames, dropped_messages, aborted = self._lost_info
            self._lost_info = ()
            if self._transport is not None:
                with anyio.CancelScope(shield=True):
                    await self._transport.aclose()
            uptime = anyio.current_time() - self._up_since
            self._emit(
                "disconnected",
                self.endpoint,
                error=error,
                dropped_frames=dropped_frames,
                dropped_messages=dropped_messages,
                aborted_transactions=aborted,
                uptime=uptime,
            )
            policy = self._policy
            # A session that died young is one more failed attempt for the backoff,
            # not a fresh start: a flapping broker sees the delay grow to max_delay.
            # (The first session came from connect(), not from an attempt of ours.)
            streak = streak + 1 if uptime < policy.stable_after and self.reconnects else 0
            delay = policy.delay(streak + 1)
            self._emit("reconnecting", None, attempt=streak + 1, delay=delay, error=error)
            del error  # (nothing of a lost connection is kept while the next one runs)
            await anyio.sleep(delay)
            try:
                streak = await self._establish(first=False, streak=streak)
            except ClientClosedError:
                return  # closed while re-establishing (e.g. waiting for the re-sent SUBSCRIBEs)
            except RETRYABLE as exc:
                self._emit("gave_up", None, error=exc)
                self._give_up(exc)
                return
            self.reconnects += 1
            if self._state is not RECONNECTING:
                # aclose() began while the connection was being made: it owns the teardown now.
                return
            self._state = advance(self._state, OPEN)
            up = self._up_event
            if up is not None:
                up.set()

    def _give_up(self, error: BaseException) -> None:
        """No attempt left: fail the client for good with ``error``."""
        self._error = error
        self._state = advance(self._state, FAILED)
        self._fail_receipts(error)
        for sub in self._subs.values():
            sub.close(error)
        if self._up_event is not None:
            self._up_event.set()

    async def _ensure_open(self) -> None:
        """Return when a connection is up; wait while one is being re-established.

        A call refused here (the client failed or is closed) still yields to the loop
        first: a caller retrying on the error (a loop of ``send``) cannot starve every
        other task, the reconnect and the heart-beats included.
        """
        while self._state is RECONNECTING:
            up = self._up_event
            assert up is not None
            await up.wait()
        if self._state is not OPEN:
            await anyio.lowlevel.checkpoint()
        self._check_open()
