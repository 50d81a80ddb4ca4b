"""Checked by mypy --strict in tests/test_typing.py (never run): what user code sees of the public API."""

from __future__ import annotations

from typing import Awaitable, Optional

from typing_extensions import assert_type

from stompfast import AsyncClient, Client, Message, Receipt, ReceiptFuture, SyncMessage


async def async_user(client: AsyncClient, message: Message) -> None:
    assert_type(await client.send("/queue/a", b"x"), None)
    assert_type(await client.send("/queue/a", b"x", receipt=True), Receipt)
    assert_type(await client.send("/queue/a", b"x", receipt=True, wait=False), Receipt)
    flag: bool = bool(message.body)
    assert_type(await client.send("/queue/a", "text", receipt=flag), Optional[Receipt])
    assert_type(message.ack(), Awaitable[None])  # a forgotten await is an unused awaitable
    await message.ack()
    await message.nack(receipt=True)
    async with client.subscribe("/queue/a", ack="client-individual") as sub:
        async for m in sub:
            assert_type(m, Message)
            await m.ack()


def blocking_user(client: Client) -> None:
    assert_type(client.send("/queue/a", b"x"), None)
    assert_type(client.send("/queue/a", b"x", receipt=True), ReceiptFuture)
    assert_type(client.send("/queue/a", b"x", receipt=True, wait=False), ReceiptFuture)
    with client.subscribe("/queue/a", ack="client-individual") as sub:
        for m in sub:
            assert_type(m, SyncMessage)
            assert_type(m.ack(), None)
            m.nack(timeout=1.0)
