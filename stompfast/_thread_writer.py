"""ThreadWriter: a blocking client's thread writing a SEND or an ACK to the socket itself.

The blocking client's calls run in the user's threads while the connection
belongs to the event loop. Where it is safe (plain TCP on asyncio, nothing
queued or being written ahead, no reconnect or stall under way) the thread
writes its frame itself, so the loop wakes only for the broker's answer
(docs/architecture.md). The link decides what its transport allows
(``Link.threads_may_write``, ``Link.may_write_from_thread``) and writes; this
object holds the lock the client installs links under, checks that the link
it read is still the client's, and numbers the threads' receipts.
"""

from __future__ import annotations

import itertools
import threading
from logging import DEBUG
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

from ._common import body_bytes
from ._framelog import frame_log
from ._protocol import Message
from ._receipt import PendingReceipt, Receipt

if TYPE_CHECKING:  # pragma: no cover
    from ._link import Link

__all__ = ["ThreadWriter"]


class ThreadWriter:
    """The thread side of one client's writes: ``send`` (with a receipt) and ``ack``, from any thread.

    ``link`` and ``is_open`` read the client's current link and whether it is
    open; ``lock`` is the client's registry lock (a reconnect installs the new
    link under it); ``loop()`` is the asyncio loop the receipts complete on.
    """

    __slots__ = ("_link", "_is_open", "_lock", "_loop", "_receipt_ids")

    def __init__(
        self, link: Callable[[], "Link"], is_open: Callable[[], bool], lock: threading.Lock, loop: Callable[[], Any],
    ) -> None:
        self._link = link
        self._is_open = is_open
        self._lock = lock
        self._loop = loop
        # Receipt ids "t<n>" of the threads' SENDs
        self._receipt_ids = itertools.count(1)

    def _may_write(self, link: "Link") -> bool:
        """(Under the lock.) Whether a thread's frame written now is the next on ``link``'s wire.

        The link read before taking the lock must still be the client's (a reconnect
        installs a new one under this lock), open and alive, with nothing queued or
        being written by the loop and no stall under way.
        """
        return self._link() is link and self._is_open() and link.may_write_from_thread()

    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str], headers: Optional[Mapping[str, Any]],
        content_type: Optional[str], on_done: Callable[[Receipt], Any],
    ) -> Optional[Receipt]:
        """A SEND with a receipt written by the calling thread; None, having sent nothing, when that is not safe."""
        link = self._link()
        if not link.threads_may_write():
            return None
        body, content_type = body_bytes(body, content_type)
        with self._lock:
            if not self._may_write(link):
                return None
            receipt_id = "t%d" % next(self._receipt_ids)
            data = link.protocol.encode_send(destination, body, headers, content_type, receipt_id)
            receipt = PendingReceipt(receipt_id, self._loop(), monotonic())
            # before anything can complete it
            receipt.add_done_callback(on_done)
            # (Threads' own counters, under the lock: the loop's are not.)
            if not link.send_from_thread(data, receipt):
                return None
        # After the write: the log takes a lock of its own.
        if frame_log.isEnabledFor(DEBUG):
            link.log_frames(">", data)
        return receipt

    def ack(self, message: Message) -> bool:
        """The common ACK written by the calling thread; False, having sent nothing, when that is not safe."""
        link = self._link()
        if not link.threads_may_write():
            return False
        with self._lock:
            data = link.ack_from_thread(message) if self._may_write(link) else None
        if data is None:
            return False
        if frame_log.isEnabledFor(DEBUG):
            link.log_frames(">", data)
        return True
