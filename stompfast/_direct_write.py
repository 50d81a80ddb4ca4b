"""DirectWriter: a blocking client's thread writing its own receipted SEND or plain ACK to the socket.

The blocking client's round trip (``send(receipt=True)``) and its
``client-individual`` drain (``for message in sub: message.ack()``) would each
wake the event loop to write one frame. Where the transport lets a thread write
(plain TCP on any loop, a WebSocket on asyncio: :mod:`._transport`), the
calling thread writes the frame itself instead, under the client's registry
lock: a reconnect installs a new link under the same lock, so a thread sees all
of a link or none of it. It may write only while its frame is the next on the
wire: the client open, nothing queued or being written by the loop, no stall
under way (``writable``, the client's answer, asked under the lock). Otherwise
nothing is sent and the caller goes through the loop as usual.

The client asks ``writable`` in one call under the lock and nothing else:
checking through a gate's several calls per message cost the blocking
client-ack drain about 10% of its CPU (docs/performance.md).
"""

from __future__ import annotations

import itertools
import threading
from logging import DEBUG
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

from ._common import body_bytes
from ._events import Message
from ._framelog import frame_log
from ._receipt import PendingReceipt, Receipt

if TYPE_CHECKING:  # pragma: no cover
    from ._link import Link

__all__ = ["DirectWriter"]


class DirectWriter:
    """What a blocking client's threads write themselves: :meth:`send` (with a receipt) and :meth:`ack`.

    Args:
        lock: the client's registry lock (it installs a new link under it).
        writable: (under the lock) the current link if a thread's frame written
            now is the next on its wire, else None.
        loop: the asyncio loop receipts resolve in (None on trio), asked at each send.
    """

    __slots__ = ("_lock", "_writable", "_loop", "_ids")

    def __init__(
        self, lock: threading.Lock, writable: Callable[[], Optional["Link"]], loop: Callable[[], Any]
    ) -> None:
        self._lock = lock
        self._writable = writable
        self._loop = loop
        # Receipt ids "t<n>", apart from the loop's ids
        self._ids = itertools.count(1)

    def send(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str],
        headers: Optional[Mapping[str, Any]],
        content_type: Optional[str],
        on_done: Callable[[Receipt], Any],
    ) -> Optional[Receipt]:
        """:meth:`AsyncClient.send_from_thread`: the receipt, or None having sent nothing."""
        body, content_type = body_bytes(body, content_type)
        with self._lock:
            link = self._writable()
            if link is None:
                return None
            receipt_id = "t%d" % next(self._ids)
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
        """:meth:`AsyncClient.ack_from_thread`: whether this thread wrote ``message``'s ACK."""
        with self._lock:
            link = self._writable()
            data = link.ack_from_thread(message) if link is not None else None
        if data is None:
            return False
        if frame_log.isEnabledFor(DEBUG):
            link.log_frames(">", data)  # type: ignore[union-attr]  # (data: a link wrote it)
        return True
