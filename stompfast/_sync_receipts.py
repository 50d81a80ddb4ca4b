"""Receipts of the sync client: :class:`ReceiptFuture` (a pending RECEIPT as a
concurrent.futures.Future), the tasks that settle them in the loop, and
:class:`Handover` (one result handed from the loop to one waiting thread, what a
confirmed ``send(receipt=True)`` waits on).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

# The state of a finished future
from concurrent.futures._base import FINISHED
from typing import Any, Awaitable, Callable, Iterable, List, Optional, Set

import anyio

from ._common import copy_error
from ._receipt import Receipt
from ._subscription import LOOP_CHECK_INTERVAL
from ._sync_loop import bounded, check_timeout
from .errors import ClientClosedError, ReceiptTimeout


# Its result: the receipt id
class ReceiptFuture(concurrent.futures.Future[str]):
    """A pending RECEIPT as a concurrent.futures.Future, from ``send(..., receipt=True, wait=False)``.

    ``result(timeout)`` returns the receipt id once the broker confirmed the
    frame and raises what made that impossible (``ServerError``,
    ``ConnectionLostError``, ``FlowControlError``, ``ClientClosedError``), or
    :class:`~stompfast.ReceiptTimeout` when ``timeout`` seconds pass first (the
    receipt stays pending: wait again, or :meth:`Client.flush`). It works with
    :func:`concurrent.futures.wait` and ``as_completed``. The frame is already
    on its way, so ``cancel()`` returns False.
    """

    def __init__(self, receipt: Receipt) -> None:
        super().__init__()
        self._receipt = receipt
        self.set_running_or_notify_cancel()

    @property
    def receipt_id(self) -> str:
        return self._receipt.receipt_id

    @property
    def error(self) -> Optional[BaseException]:
        """What failed the receipt (None while pending or once confirmed)."""
        return super().exception(0) if self.done() else None

    def wait(self, *, timeout: Optional[float] = None) -> "ReceiptFuture":
        """Wait for the RECEIPT and return this future; raise like :meth:`result`."""
        self.result(timeout)
        return self

    def result(self, timeout: Optional[float] = None) -> Any:
        """The receipt id, once confirmed; ReceiptTimeout after ``timeout`` seconds."""
        try:
            return super().result(check_timeout(timeout))
        except concurrent.futures.TimeoutError:
            # The receipt's own error is a TimeoutError, or it came just now
            if self.done():
                return super().result(0)
            raise ReceiptTimeout(
                f"no RECEIPT {self.receipt_id!r} within {timeout:g} s",
                receipt_id=self.receipt_id,
                timeout=timeout,
            ) from None

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The receipt's failure (None once confirmed); ReceiptTimeout after ``timeout`` seconds."""
        try:
            return super().exception(check_timeout(timeout))
        except concurrent.futures.TimeoutError:
            raise ReceiptTimeout(
                f"no RECEIPT {self.receipt_id!r} within {timeout:g} s",
                receipt_id=self.receipt_id,
                timeout=timeout,
            ) from None

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self.error is not None else "confirmed")
        return f"<ReceiptFuture {self.receipt_id!r} {state}>"


def settle(future: ReceiptFuture, error: Optional[BaseException]) -> None:
    """Finish ``future``: confirmed (``error`` None) or failed; no-op once done."""
    if future.done():
        return
    if error is None:
        future.set_result(future.receipt_id)
    else:
        future.set_exception(error)


# -- ReceiptFuture internals, used from outside its methods ---------------------------------
#
# The one place outside ReceiptFuture's own methods that touches private state,
# always as ``future._name``: its ``_receipt`` (the async Receipt it follows, kept
# off the public class so that it mirrors ``Receipt``), and, in ``confirmed_future``, the concurrent.futures.Future
# internals (``_condition``, ``_state``, ``_result``, ``_exception``, ``_waiters``,
# ``_done_callbacks``). ``confirmed_future`` runs once per ``send(receipt=True)``
# (the hot path): building a finished future through the public API (``__init__``,
# ``set_running_or_notify_cancel``, ``set_result``) takes a new Condition and its
# locking and notifying per call, for a future nobody can be waiting on yet.

#: The condition shared by futures created finished (:func:`confirmed_future`).
_DONE_CONDITION = threading.Condition()


def confirmed_future(receipt: Receipt) -> ReceiptFuture:
    """A future born done (``send(receipt=True)`` returns one per call, after the RECEIPT came).

    What ``__init__`` + ``set_running_or_notify_cancel`` + ``set_result`` leave
    behind, without their locking and notifying: nobody can be waiting on a
    future nobody has seen yet. Finished futures never wait or notify on their
    condition (they only enter it briefly), so they share one.
    """
    future = ReceiptFuture.__new__(ReceiptFuture)
    future._condition = _DONE_CONDITION
    future._state = FINISHED
    future._result = receipt.receipt_id
    future._exception = None
    future._waiters = []
    future._done_callbacks = []  # type: ignore[attr-defined]  # (typeshed leaves it out)
    future._receipt = receipt
    return future


def receipts_of(futures: Iterable[Optional[ReceiptFuture]]) -> List[Optional[Receipt]]:
    """The async Receipts the ``futures`` follow (None stays None); TypeError for anything else."""
    pending: List[Optional[Receipt]] = []
    for future in futures:
        if future is not None and not isinstance(future, ReceiptFuture):
            raise TypeError(f"wait_receipts takes the ReceiptFutures of this client, not {future!r}")
        pending.append(None if future is None else future._receipt)
    return pending


def settle_done(futures: Iterable[Optional[ReceiptFuture]]) -> None:
    """(In the loop.) Settle every future whose RECEIPT came or failed, without waiting for its watcher."""
    for future in list(futures):
        if future is not None and future._receipt.done():
            error = future._receipt.error
            settle(future, None if error is None else copy_error(error))


# -- the tasks that settle pipelined receipts ------------------------------------------------


async def send_pipelined(
    send: Callable[[], Awaitable[Receipt]],
    timeout: Optional[float],
    on_timeout: Callable[[], BaseException],
    ready: "concurrent.futures.Future[ReceiptFuture]",
    outstanding: Set[ReceiptFuture],
) -> None:
    """Send with a receipt, hand back a ReceiptFuture at once, then settle it when the RECEIPT comes.

    ``outstanding`` (touched only in the loop) lets flush() settle the futures
    it covered in the step it returns, before this task's turn comes.
    """
    try:
        receipt = await bounded(send, timeout, on_timeout)
    except anyio.get_cancelled_exc_class():
        ready.set_exception(ClientClosedError("the client's event loop stopped"))
        raise
    except BaseException as exc:
        ready.set_exception(exc)
        return
    future = ReceiptFuture(receipt)
    outstanding.add(future)
    ready.set_result(future)
    try:
        await receipt.wait()
    except anyio.get_cancelled_exc_class():
        settle(future, ClientClosedError("the client's event loop stopped before the RECEIPT came"))
        raise
    except BaseException as exc:
        settle(future, exc)
    else:
        settle(future, None)
    finally:
        outstanding.discard(future)


async def wait_and_settle(
    wait: Callable[[], Awaitable[None]], futures: Iterable[Optional[ReceiptFuture]]
) -> None:
    await wait()
    settle_done(futures)


# -- a confirmed send's wait -----------------------------------------------------------------


class Handover:
    """One result handed from the event loop to one waiting thread: a lock released once.

    Cheaper than a concurrent.futures.Future (no condition, no callbacks): the
    thread blocks in ``acquire`` and the loop's ``set`` releases it.
    """

    __slots__ = ("_lock", "value", "error")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def set(self, value: Any = None, error: Optional[BaseException] = None) -> None:
        """(In the loop, once.)"""
        self.value = value
        self.error = error
        self._lock.release()

    def wait(self, timeout: Optional[float], loop_thread: threading.Thread) -> bool:
        """(In the waiting thread.) True once set; False after ``timeout``; ClientClosedError if the loop died."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = LOOP_CHECK_INTERVAL
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return False
            if self._lock.acquire(timeout=wait):
                return True
            if not loop_thread.is_alive():
                raise ClientClosedError("the client's event loop stopped while waiting")
