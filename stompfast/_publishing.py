"""Publisher: a client's SEND frames assembled and queued on the current connection, in the loop.

:meth:`AsyncClient.send <stompfast.AsyncClient.send>` writes the plain SEND (bytes,
no headers, no receipt) itself, inline: that is the hot path, and it pays no call
but the session's encoding and the outbox's offer. Every other SEND comes here:
the message options written as the broker's headers, a ``str`` body encoded, a
receipt registered before its frame can be written, a frame queued while the
send buffer has room (or after waiting for it), and ``flush``'s probe.
``send_nowait`` is the same without a wait, for synchronous code in the loop (the
blocking client's receipted sends when its thread cannot write them itself).

The publisher never sees the client. The client decides whether it may send
now (:mod:`._lifecycle`) and hands over the link it sends on; after a wait for
room the publisher asks for the current link again through the callable it was
given (a reconnect may have replaced it). It writes only through the link's verbs. A blocking
client's thread writing its own SEND or ACK is :mod:`._direct_write`'s.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Tuple

import anyio

from ._common import body_bytes
from ._receipt import PendingReceipt, Receipt
from ._stats import Counters

if TYPE_CHECKING:  # pragma: no cover
    from ._link import Link

__all__ = ["Publisher", "encode_send"]


class Publisher:
    """A client's SENDs other than the plain one, and the waits for room and receipts that come with them.

    Args:
        link: the client's current link (a reconnect replaces it).
        check_open: raise why the client cannot send now (closed, failed, reconnecting).
        counters: the client's counters (``flush`` counts its probe there).
    """

    __slots__ = ("_link", "_check_open", "_counts")

    def __init__(self, link: Callable[[], "Link"], check_open: Callable[[], None], counters: Counters) -> None:
        self._link = link
        self._check_open = check_open
        self._counts = counters

    async def send(
        self, link: "Link", destination: str, body: Any, headers: Optional[Mapping[str, Any]],
        content_type: Optional[str], receipt: bool, wait: bool, content_length: bool, ttl: Optional[float],
        priority: Optional[int], persistent: Optional[bool],
    ) -> Optional[Receipt]:
        """:meth:`AsyncClient.send` of anything but a plain SEND, on ``link`` (the client is open on it)."""
        if ttl is not None or priority is not None or persistent is not None:
            headers = link.protocol.message_headers(headers, ttl, priority, persistent, time.time())
        data, receipt_id = encode_send(link, destination, body, headers, content_type, receipt, content_length)
        if receipt_id is not None:
            return await self._send_receipted(link, data, receipt_id, wait)
        if not link.offer(data):
            await self.queue_past_mark(data)
        return None

    async def queue_past_mark(self, data: bytes) -> None:
        """Queue a receipt-less ``data`` the outbox did not take at once (past the write-through mark), and write.

        It waits while the send buffer is full; then what is queued is written
        from the sending task, as a burst past the mark always is.
        """
        await self.queue_when_room(data)
        await self._link().catch_up()

    async def queue_when_room(self, data: bytes) -> None:
        """Queue ``data`` on the current connection's outbox, waiting first while it holds ``send_buffer_bytes``.

        Raises what the client's ``check_open`` raises when the connection went
        down (or the client closed) while waiting.
        """
        link = self._link()
        if not link.has_room():
            await link.wait_for_room()
            self._check_open()
            # The link may have been replaced meanwhile.
            link = self._link()
        link.queue(data)

    async def _send_receipted(self, link: "Link", data: bytes, receipt_id: str, wait: bool) -> Receipt:
        pending = link.register(receipt_id)
        if wait and link.write_first(data):
            # Nothing queued ahead of it and the caller is about to block: written
            # from this task (no writer wake-up, no extra loop iteration).
            await pending.wait()
            return pending
        await self.queue_when_room(data)
        if wait:
            self._link().write_now()
            await pending.wait()
        return pending

    def send_nowait(
        self, link: "Link", destination: str, body: Any, headers: Optional[Mapping[str, Any]],
        content_type: Optional[str], receipt: bool,
    ) -> Optional[Receipt]:
        """:meth:`AsyncClient.send_nowait` on ``link`` (the client is open on it): queued at once, or ``WouldBlock``."""
        if not link.has_room():
            raise anyio.WouldBlock
        data, receipt_id = encode_send(link, destination, body, headers, content_type, receipt)
        if receipt_id is None:
            if not link.offer(data):
                # Past the write-through mark: out now, as a sending task would
                link.queue(data)
                link.write_now()
            return None
        pending = link.register(receipt_id)
        if link.write_first(data):
            return pending
        link.queue(data)
        link.write_now()
        return pending

    async def flush(self, link: "Link") -> None:
        """:meth:`AsyncClient.flush` on ``link`` (the client is open on it): every receipt now, a probe after all."""
        pending: List[PendingReceipt] = link.outstanding()
        data, receipt_id = link.protocol.probe()
        probe = link.register(receipt_id)
        await self.queue_when_room(data)
        self._counts.control += 1
        # The probe is two frames in one entry: BEGIN and ABORT.
        self._counts.extra_frames += 1
        pending.append(probe)
        self._link().write_now()
        for receipt in pending:
            await receipt.wait()


def encode_send(
    link: "Link", destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
    receipt: bool, content_length: bool = True,
) -> Tuple[bytes, Optional[str]]:
    """The SEND frame of :meth:`AsyncClient.send` on ``link``'s session, and its receipt id (send's body rules)."""
    body, content_type = body_bytes(body, content_type)
    return link.protocol.send(
        destination, body, headers, content_type=content_type, receipt=receipt, content_length=content_length
    )
