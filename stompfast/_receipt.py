"""Receipt: a frame's confirmation from the broker, awaited by any number of tasks or called back.

Also :class:`ReceiptRegistry`, one connection's pending receipts.
"""

from __future__ import annotations

import threading
from time import monotonic
from typing import Any, Callable, Dict, List, Optional

import anyio

from ._common import copy_error
from .errors import StompError

__all__ = ["PendingReceipt", "Receipt", "ReceiptRegistry", "await_receipts"]


class Receipt:
    """A frame's confirmation from the broker, awaited with ``await receipt``.

    Many can be outstanding at once; :meth:`AsyncClient.wait_receipts` awaits a
    group, :meth:`AsyncClient.flush` everything sent so far. Any number of tasks
    may wait on one receipt; cancelling one waiter does not disturb the others.
    """

    __slots__ = ("receipt_id", "_done", "_error", "_waiters", "_loop", "_callbacks")

    def __init__(self, receipt_id: str, loop: Any = None) -> None:
        self.receipt_id = receipt_id
        self._done = False
        self._error: Optional[BaseException] = None
        # Created only when a task actually waits: a pipelined receipt that is
        # confirmed before anybody awaits it costs no synchronisation object.
        # On asyncio (``loop`` given) waiters are bare loop futures, elsewhere
        # anyio Events: an anyio.Event looks the backend up on every construction.
        self._waiters: Optional[List[Any]] = None
        self._loop = loop
        self._callbacks: Optional[List[Callable[["Receipt"], Any]]] = None

    def done(self) -> bool:
        """True once the RECEIPT arrived or the wait failed."""
        return self._done

    @property
    def error(self) -> Optional[BaseException]:
        return self._error

    async def wait(self) -> "Receipt":
        """Wait for the RECEIPT; raise what made it impossible (ServerError, ConnectionLostError...)."""
        if not self._done:
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = []
            loop = self._loop
            if loop is not None:
                waiter = loop.create_future()
                waiters.append(waiter)
                try:
                    await waiter
                finally:
                    # Cancelled: forget this waiter only
                    if not self._done:
                        waiters.remove(waiter)
            else:
                event = anyio.Event()
                waiters.append(event)
                try:
                    await event.wait()
                finally:
                    if not self._done:
                        waiters.remove(event)
        if self._error is not None:
            raise copy_error(self._error)
        return self

    def __await__(self) -> Any:
        return self.wait().__await__()

    def add_done_callback(self, fn: Callable[["Receipt"], Any]) -> None:
        """Call ``fn(receipt)`` in the event loop once the receipt is done (at once if it is).

        For synchronous code in the loop that cannot await (the blocking client
        completes a thread's wait from here); ``fn`` must be quick and must not raise.
        """
        if self._done:
            fn(self)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<Receipt {self.receipt_id!r} {state}>"


class PendingReceipt(Receipt):
    """The client's handle on a :class:`Receipt` it registered: it alone completes it.

    (Users only ever see the :class:`Receipt` interface.)
    """

    __slots__ = ("sent_at",)

    def __init__(self, receipt_id: str, loop: Any = None, sent_at: float = 0.0) -> None:
        super().__init__(receipt_id, loop)
        #: when the frame was given to the connection (``time.monotonic``, not the loop's clock: uvloop's
        #: ticks in whole milliseconds, which would read a fast round trip as 0)
        self.sent_at = sent_at

    def resolve(self) -> None:
        """(The client, in the loop.) The RECEIPT arrived: wake the waiters, run the callbacks."""
        if self._done:
            return
        self._done = True
        if self._callbacks is not None:
            for fn in self._callbacks:
                fn(self)
        waiters = self._waiters
        if waiters:
            if self._loop is not None:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
            else:
                for event in waiters:
                    event.set()

    def reject(self, error: BaseException) -> None:
        """(The client, in the loop.) No RECEIPT can come: fail the waiters with ``error``."""
        if not self._done:
            self._error = error
            self.resolve()


class ReceiptRegistry:
    """One connection's pending receipts: registered as frames are sent, failed together when it ends.

    Built with each connection (a receipt outlives nothing: a new connection
    starts empty) and owned by the client meanwhile; the connection's inbox
    resolves and pops receipts from :attr:`pending` directly, which stays a
    plain dict for that hot path. ``lock`` is the client's registry lock: the
    blocking client's threads add to :attr:`pending` under it
    (``send_from_thread``), so :meth:`fail` takes it too.
    """

    __slots__ = ("pending", "lock", "loop")

    def __init__(self, lock: threading.Lock, loop: Any = None) -> None:
        #: receipt id -> the receipt awaiting it
        self.pending: Dict[str, PendingReceipt] = {}
        self.lock = lock
        # the asyncio loop (None on trio): receipts wait on its futures
        self.loop = loop

    def __len__(self) -> int:
        return len(self.pending)

    def register(self, receipt_id: str, refused: Optional[BaseException] = None) -> PendingReceipt:
        """A pending receipt for ``receipt_id``; failed at once with ``refused`` (then not kept) if given."""
        receipt = PendingReceipt(receipt_id, self.loop, monotonic())
        if refused is not None:
            receipt.reject(refused)
        else:
            self.pending[receipt_id] = receipt
        return receipt

    def take(self, receipt_id: Optional[str]) -> Optional[PendingReceipt]:
        """The receipt awaiting ``receipt_id``, forgotten here (None: none is): the inbox resolves it."""
        if receipt_id is None:
            return None
        return self.pending.pop(receipt_id, None)

    def adopt(self, receipt: PendingReceipt) -> None:
        """(Under the lock.) Keep ``receipt``, made by a thread that writes its frame itself."""
        self.pending[receipt.receipt_id] = receipt

    def outstanding(self) -> List[PendingReceipt]:
        """The receipts awaited now (a copy)."""
        return list(self.pending.values())

    def fail(self, error: BaseException) -> int:
        """Fail every pending receipt with ``error``, forget them, and return how many there were.

        Under the lock: a thread registering a receipt must not land between the
        snapshot and the clear, nor change the dict while it is iterated.
        """
        with self.lock:
            receipts = list(self.pending.values())
            self.pending.clear()
        for receipt in receipts:
            receipt.reject(error)
        return len(receipts)


async def await_receipts(receipts: List[PendingReceipt], deadline: float) -> int:
    """Wait for ``receipts`` until ``deadline`` (the loop's clock; shielded); how many were still unconfirmed.

    A refused or lost one counts as done: the wait is for the broker's answer, not a success.
    """
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            for receipt in receipts:
                try:
                    await receipt.wait()
                except StompError:
                    pass
    return sum(1 for receipt in receipts if not receipt.done())
