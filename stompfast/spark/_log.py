"""The source's batch log (exactly-once mode): each micro-batch's rows, kept where every executor can read them.

With ``exactlyOnce`` the reader writes each batch it plans to this log, durably, before it
acks the batch's messages; from then on the log, not the broker, holds them. A batch is
then the same rows however often Spark asks for it:

- ``read(start)`` on the driver first looks for a logged batch that begins at ``start``
  (the driver died after the log write, before Spark wrote its offset log) and returns it;
- ``readBetweenOffsets(start, end)`` on an executor (Spark replays a planned batch that was
  not committed) reads it back by its offsets.

A message the broker delivers again after the log holds it (the driver died between the
log write and the broker's receipt for the acks) is recognised by its key (``message-id``
or a header of the producer's) among the batches not yet marked acked, and dropped.

Layout under the log's location, one file per entry, each written whole and then renamed
into place (a reader never sees half an entry)::

    batches/<start>-<end>.arrow   the batch's rows, an Arrow IPC stream (20-digit offsets)
    acked/<end>                   every message of the batches ending at or before <end>
                                  was acked, and the broker confirmed it

:meth:`BatchLog.prune` deletes what no restart can ask for: batches Spark committed whose
acks were confirmed. The location is a local or mounted path (on a cluster: shared storage
every executor mounts, as the query's checkpoint location must be) or a URI that
``pyarrow.fs`` opens (``s3://``, ``gs://``, ``hdfs://``); a local path's entries are
fsynced before the rename.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Iterable, List, Optional, Set, Tuple

import pyarrow as pa

from ..errors import ConfigurationError, StompError

__all__ = ["BatchLog", "DedupKey", "LogEntryMissing"]

_DIGITS = 20


class LogEntryMissing(StompError):
    """A batch Spark asks for again is not in the exactly-once log (deleted by hand, or another location)."""


def _offsets(name: str) -> Optional[Tuple[int, int]]:
    """``(start, end)`` of a batch entry's file name, or None for anything else (a temporary file)."""
    stem, dot, suffix = name.partition(".")
    start, dash, end = stem.partition("-")
    if dot and suffix == "arrow" and dash and start.isdigit() and end.isdigit():
        return int(start), int(end)
    return None


class _LocalStore:
    """Entries as files under a local (or mounted) directory: written, fsynced, renamed."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def put(self, folder: str, name: str, data: bytes) -> None:
        directory = os.path.join(self.root, folder)
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, os.path.join(directory, name))
        # The rename itself survives a crash only once the directory is synced
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def get(self, folder: str, name: str) -> Optional[bytes]:
        try:
            with open(os.path.join(self.root, folder, name), "rb") as source:
                return source.read()
        except FileNotFoundError:
            return None

    def names(self, folder: str) -> List[str]:
        try:
            return os.listdir(os.path.join(self.root, folder))
        except FileNotFoundError:
            return []

    def delete(self, folder: str, name: str) -> None:
        try:
            os.remove(os.path.join(self.root, folder, name))
        except FileNotFoundError:
            pass


class _ArrowStore:
    """Entries as objects of a ``pyarrow.fs`` file system (``s3://``, ``hdfs://``, ...): written, then moved."""

    def __init__(self, uri: str) -> None:
        from pyarrow import fs

        self.fs, self.root = fs.FileSystem.from_uri(uri)
        self._selector = fs.FileSelector
        self._not_found = fs.FileType.NotFound

    def put(self, folder: str, name: str, data: bytes) -> None:
        directory = f"{self.root}/{folder}"
        self.fs.create_dir(directory, recursive=True)
        temporary = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(temporary) as out:
            out.write(data)
        self.fs.move(temporary, f"{directory}/{name}")

    def get(self, folder: str, name: str) -> Optional[bytes]:
        path = f"{self.root}/{folder}/{name}"
        if self.fs.get_file_info(path).type == self._not_found:
            return None
        with self.fs.open_input_stream(path) as source:
            return bytes(source.readall())

    def names(self, folder: str) -> List[str]:
        infos = self.fs.get_file_info(self._selector(f"{self.root}/{folder}", allow_not_found=True))
        return [info.base_name for info in infos]

    def delete(self, folder: str, name: str) -> None:
        path = f"{self.root}/{folder}/{name}"
        if self.fs.get_file_info(path).type != self._not_found:
            self.fs.delete_file(path)


class BatchLog:
    """The exactly-once log of one query's source (see the module docstring)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._store: Any = _ArrowStore(location) if "://" in location and not location.startswith("file://") \
            else _LocalStore(location[len("file://"):] if location.startswith("file://") else location)

    def _batches(self) -> List[Tuple[int, int]]:
        """Every logged batch's ``(start, end)``, in order."""
        found = (_offsets(name) for name in self._store.names("batches"))
        return sorted(entry for entry in found if entry is not None)

    def acked_end(self) -> int:
        """The highest offset whose batches' acks the broker confirmed (0: none)."""
        marks = [int(name) for name in self._store.names("acked") if name.isdigit()]
        return max(marks, default=0)

    def write(self, start: int, end: int, batch: pa.RecordBatch) -> int:
        """Log the batch covering offsets ``start`` (excluded) to ``end``; returns the bytes written."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        data = sink.getvalue().to_pybytes()
        self._store.put("batches", f"{start:0{_DIGITS}d}-{end:0{_DIGITS}d}.arrow", data)
        return len(data)

    def _load(self, start: int, end: int) -> Optional[pa.RecordBatch]:
        data = self._store.get("batches", f"{start:0{_DIGITS}d}-{end:0{_DIGITS}d}.arrow")
        if data is None:
            return None
        table = pa.ipc.open_stream(data).read_all()
        return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist(
            [], schema=table.schema)

    def find(self, start: int) -> Optional[Tuple[int, pa.RecordBatch]]:
        """The logged batch that begins at ``start``, as ``(end, rows)``, or None."""
        for first, end in self._batches():
            if first == start:
                batch = self._load(first, end)
                if batch is not None:
                    return end, batch
        return None

    def read(self, start: int, end: int) -> pa.RecordBatch:
        """The rows of the batch ``start``..``end``; :class:`LogEntryMissing` if it is not in the log."""
        batch = self._load(start, end)
        if batch is None:
            raise LogEntryMissing(
                f"batch {start}..{end} is not in the exactly-once log at {self.location!r}: it was deleted, or the"
                " query runs with another logLocation than the one it was started with"
            )
        return batch

    def mark_acked(self, end: int) -> None:
        """Note that every message of the batches ending at or before ``end`` is acked, confirmed by the broker."""
        self._store.put("acked", f"{end:0{_DIGITS}d}", b"")

    def unacked_keys(self, key: Callable[[pa.RecordBatch], Iterable[Optional[str]]]) -> Set[str]:
        """The keys (``key(rows)``) of every message in a logged batch whose acks were not confirmed."""
        acked = self.acked_end()
        keys: Set[str] = set()
        for start, end in self._batches():
            if end > acked:
                batch = self._load(start, end)
                if batch is not None:
                    keys.update(k for k in key(batch) if k is not None)
        return keys

    def prune(self, committed: int) -> int:
        """Delete the batches Spark committed (ending at or before ``committed``) whose acks were confirmed.

        Returns how many batch entries were deleted. The newest ack mark stays.
        """
        limit = min(committed, self.acked_end())
        deleted = 0
        for start, end in self._batches():
            if end <= limit:
                self._store.delete("batches", f"{start:0{_DIGITS}d}-{end:0{_DIGITS}d}.arrow")
                deleted += 1
        marks = sorted(int(name) for name in self._store.names("acked") if name.isdigit())
        for mark in marks[:-1]:
            self._store.delete("acked", f"{mark:0{_DIGITS}d}")
        return deleted


class DedupKey:
    """What names a message across its redeliveries: ``message-id`` (the default) or ``header:NAME`` (the producer's).

    Read from a delivered :class:`~stompfast.Message` and from a logged batch's rows alike.
    """

    def __init__(self, spec: str) -> None:
        text = spec.strip()
        if text.lower() == "message-id":
            self.header: Optional[str] = None
        elif text.lower().startswith("header:") and text[len("header:"):].strip():
            self.header = text[len("header:"):].strip()
        else:
            raise ConfigurationError(f"option 'dedupKey' is 'message-id' or 'header:NAME', not {spec!r}")
        self.spec = text

    def of_message(self, message: Any) -> Optional[str]:
        """The key of one delivery (None when its header is missing: it cannot be recognised)."""
        if self.header is None:
            return message.message_id  # type: ignore[no-any-return]
        return message.headers.get(self.header)  # type: ignore[no-any-return]

    def of_rows(self, batch: pa.RecordBatch) -> List[Optional[str]]:
        """The keys of a logged batch's rows, in order."""
        if self.header is None:
            return batch.column("message_id").to_pylist()  # type: ignore[no-any-return]
        name = self.header
        return [dict(pairs).get(name) for pairs in batch.column("headers").to_pylist()]
