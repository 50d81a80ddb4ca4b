"""An output that is a pipe: how much of what was written its reader has read, and whether it left.

A successful write into a pipe only means the bytes are in the kernel's buffer (64 KiB on
Linux): a reader that exits without reading them (``| head -1``) loses them, and the writer
hears of it only at its next write (EPIPE), which may never come while it waits for a
message. ``stompfast listen`` acknowledges a message once its reader has taken it, so it
asks the kernel two things, without writing:

- whether the reader left: ``poll()`` reports POLLERR on the write end of a pipe whose
  read end is closed (POLLHUP on some systems), even with no events asked for;
- how many bytes were written and not read yet: FIONREAD on a Linux pipe counts its buffer
  from either end.

Both are Linux facts (tests/test_cli_pipe.py checks them), so :func:`output_pipe` offers a
watch only there; elsewhere listen acknowledges once the write succeeded.
"""

from __future__ import annotations

import array
import errno
import os
import select
import stat
import sys
from typing import Any, NoReturn

# How often a waiting command looks whether its reader left (a zero-timeout poll(): cheap)
READER_CHECK_INTERVAL = 0.1
# Waiting for the reader to read what was written: the first look is at once (a reader
# blocked in read() takes a line within microseconds), then ever longer pauses up to this,
# so a slow reader costs a few wake-ups a second and a fast one no added latency.
TAKEN_FIRST_PAUSE = 0.00005
TAKEN_LONGEST_PAUSE = 0.05


class OutputPipe:
    """The write end ``fd`` of a pipe, asked about its reader (Linux)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def reader_left(self) -> bool:
        """True once the read end is closed: every reader exited or closed it."""
        poller = select.poll()
        # No events asked: poll() still reports POLLERR and POLLHUP, the reader's leaving
        poller.register(self.fd, 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))

    def unread_bytes(self) -> int:
        """Bytes in the pipe's buffer: written (by anyone) and not read yet."""
        # Linux only (output_pipe): these modules do not exist on Windows
        import fcntl
        import termios

        count = array.array("i", [0])
        fcntl.ioctl(self.fd, termios.FIONREAD, count, True)
        return count[0]

    async def taken(self) -> None:
        """Return once the reader has read everything written so far.

        Raises BrokenPipeError when the reader left with bytes still unread. What it read
        before it left counts as taken: the buffer is looked at first.
        """
        import anyio

        pause = 0.0
        while self.unread_bytes() > 0:
            if self.reader_left():
                raise _reader_left_error()
            await anyio.sleep(pause)
            pause = min(max(pause * 2, TAKEN_FIRST_PAUSE), TAKEN_LONGEST_PAUSE)

    async def watch(self) -> NoReturn:
        """Raise BrokenPipeError as soon as the reader leaves (run beside the waiting command)."""
        import anyio

        while not self.reader_left():
            await anyio.sleep(READER_CHECK_INTERVAL)
        raise _reader_left_error()


def _reader_left_error() -> BrokenPipeError:
    # The error a write would have raised: the CLI exits 141 on it, quietly (cli.main)
    return BrokenPipeError(errno.EPIPE, "the output's reader left")


def output_pipe(stream: Any) -> OutputPipe | None:
    """An :class:`OutputPipe` for ``stream`` when it is a pipe (or FIFO) on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fd = stream.fileno()
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    # No descriptor (an in-memory stream, pytest's capture) or a closed one: no pipe to watch
    except (AttributeError, OSError, ValueError):
        return None
    return OutputPipe(fd) if is_pipe else None
