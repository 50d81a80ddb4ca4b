"""Where the examples connect: $STOMPFAST_URL, else an in-process test broker for the run.

So every example runs as it is on any machine (``python examples/producer.py``) and
against a real broker with ``STOMPFAST_URL=stomp://guest:guest@127.0.0.1:61613/``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def broker_url() -> Iterator[str]:
    url = os.environ.get("STOMPFAST_URL")
    if url:
        yield url
        return
    from stompfast.testing import Broker

    with Broker.in_thread() as broker:
        yield broker.url
