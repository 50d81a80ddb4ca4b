"""Checked by mypy in tests/test_typing.py (never run): each marked line must be an error."""

from __future__ import annotations

from stompfast import AsyncClient, Client, Message, Receipt


async def forgets(client: AsyncClient, message: Message) -> None:
    message.ack()  # error: unused-awaitable (a forgotten await)
    receipt: Receipt = await client.send("/queue/a", b"x")  # error: assignment (None without receipt=True)
    print(receipt)


def blocking(client: Client) -> None:
    client.send("/queue/a", b"x", receipt=True).receipt_id.upper()
    print(client.send("/queue/a", b"x").receipt_id)  # error: attr-defined (None without a receipt)
    Client("stomp://h", heartbeat=(0, 0))  # error: call-arg (the option is heart_beat)
