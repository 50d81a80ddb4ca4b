"""The ``stomp`` Spark data source: a streaming reader and a batch/streaming writer.

Theory of operation
-------------------
**Reader** (:class:`StompStreamReader`, a ``SimpleDataSourceStreamReader``). Spark
runs ``initialOffset``/``read``/``commit`` in one long-lived Python process on the
driver per query, so the STOMP connection lives there: it is opened lazily by the
first ``read`` (a :class:`stompfast.Client`, whose loop thread serves heart-beats in
the background) and subscribes to every destination in a client ack mode, with the
broker prefetch bounded. The callback of each subscription moves messages into one
bounded queue; ``read(start)`` takes up to ``maxMessagesPerBatch`` /
``maxBytesPerBatch`` of them, waiting up to ``pollTimeout`` for the first, numbers
them with a per-query delivery counter (the offset is ``{"seq": n}``) and keeps them
as *pending* until acked.

Acks (at-least-once): a message is acked only once Spark has committed the batch
that holds it. Spark calls ``commit(end)`` for batch N only when it plans batch N+1,
which never happens on an idle stream, and a batch that fills the broker's prefetch
window would then deadlock. So ``read(start)`` first acks every pending message
with ``seq <= start`` ("eager ack": Spark asks for data after ``start`` only once the
batch ending at ``start`` is committed), and ``commit(end)`` is the backstop. Neither
``stop()`` (not reliably called) nor anything else acks the rest: when the process
dies, the broker re-queues what was never acked. ``readBetweenOffsets`` (a replay of
an uncommitted batch after a restart, run on an executor that cannot see the
driver's buffer) returns nothing: those messages were never acked and come back from
the broker as new deliveries. Offsets restart from the checkpointed ``start``.

**Writer** (:class:`StompWriter`, :class:`StompStreamWriter`). Each task opens one
connection, sends every row with a receipt, keeps at most ``receiptWindow`` receipts
outstanding, and returns a :class:`StompCommitMessage` (counts) only when every receipt
arrived; a broker ERROR or a lost connection fails the task with the broker's message.
The driver-side ``commit`` adds the counts up (:attr:`StompWriter.last_commit`).

Nothing unpicklable is held by a data source, reader or writer: connections are
made inside the process that uses them and dropped from the pickled state.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    DataSourceWriter,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import ConfigurationError
from ._options import (
    ACK_MODES,
    ConnectionOptions,
    client_kwargs,
    get_float,
    get_int,
    get_list,
    get_str,
    prefixed,
)

__all__ = [
    "READ_SCHEMA",
    "StompCommitMessage",
    "StompDataSource",
    "StompStreamReader",
    "StompStreamWriter",
    "StompWriter",
]

log = logging.getLogger("stompfast.spark")

#: The rows of ``spark.readStream.format("stomp")``.
READ_SCHEMA = StructType([
    StructField("destination", StringType(), True),
    StructField("message_id", StringType(), True),
    StructField("subscription", StringType(), True),
    StructField("headers", MapType(StringType(), StringType(), True), True),
    StructField("body", BinaryType(), True),
    StructField("received_at", TimestampType(), True),
])

_UTC = datetime.timezone.utc


class StompDataSource(DataSource):
    """``format("stomp")``: streaming reader (``readStream``), batch and streaming writer (``write``)."""

    @classmethod
    def name(cls) -> str:
        return "stomp"

    def schema(self) -> StructType:
        return READ_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> "StompStreamReader":
        return StompStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> "StompWriter":
        return StompWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "StompStreamWriter":
        return StompStreamWriter(dict(self.options), schema)


# -- the streaming reader --------------------------------------------------------------------


class _ReaderRuntime:
    """The connection, subscriptions and pending messages of a reader: lives only in the driver process."""

    def __init__(self, reader: "StompStreamReader", seq: int) -> None:
        from .._sync import Client

        self.reader = reader
        self.seq = seq  # the last delivery number handed out
        self.pending: Deque[Tuple[int, Any]] = deque()  # (seq, SyncMessage), not acked yet, in seq order
        self.held: Optional[Any] = None  # a message taken but left for the next batch (byte limit)
        self.failure: Optional[BaseException] = None
        self.closing = False
        capacity = max(1, reader.prefetch) * max(1, len(reader.destinations))
        self.queue: "queue.Queue[Any]" = queue.Queue(maxsize=capacity)
        self.client = Client(**client_kwargs(reader.conn))
        try:
            self.client.connect()
            self.subs = [
                self.client.subscribe(
                    destination,
                    ack=reader.ack,
                    headers=reader.sub_headers or None,
                    buffer_size=reader.prefetch,
                    callback=self._deliver,
                    on_error=self._on_error,
                )
                for destination in reader.destinations
            ]
        except BaseException:
            self.client.close()
            raise

    def _deliver(self, message: Any) -> None:
        # (In a subscription's callback thread.) A full queue holds the subscription back,
        # and through its bounded buffer the broker: that is the backpressure.
        while not self.closing:
            try:
                self.queue.put(message, timeout=0.1)
                return
            except queue.Full:
                continue

    def _on_error(self, exc: BaseException, message: Any) -> None:
        if message is None:  # the connection failed: the next read raises it
            self.failure = exc

    def poll(self, max_messages: int, max_bytes: Optional[int], timeout: float) -> List[Any]:
        taken: List[Any] = []
        size = 0
        deadline = time.monotonic() + timeout
        while len(taken) < max_messages:
            if self.held is not None:
                message, self.held = self.held, None
            else:
                try:
                    if taken:
                        message = self.queue.get_nowait()
                    else:
                        message = self.queue.get(timeout=min(0.05, max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    if taken or time.monotonic() >= deadline:
                        break
                    if self.failure is not None:
                        raise self.failure from None
                    continue
            n = len(message.body)
            if taken and max_bytes is not None and size + n > max_bytes:
                self.held = message
                break
            taken.append(message)
            size += n
        if not taken and self.failure is not None:
            raise self.failure
        return taken

    def ack_upto(self, seq: int) -> int:
        """Ack every pending message numbered ``<= seq`` in one crossing into the loop; how many."""
        done: List[Any] = []
        pending = self.pending
        while pending and pending[0][0] <= seq:
            done.append(pending.popleft()[1])
        if not done or self.reader.ack == "auto":
            return len(done)
        if self.reader.ack == "client":  # cumulative: the last one of each subscription covers the rest
            last: Dict[str, Any] = {}
            for message in done:
                last[message.subscription] = message
            to_ack = list(last.values())
        else:
            to_ack = done
        client = self.client.async_client

        async def ack_all() -> None:
            for message in to_ack:
                await client.ack(message)

        self.client.portal.call(ack_all)
        return len(done)

    def close(self) -> None:
        self.closing = True
        self.client.close()


class StompStreamReader(SimpleDataSourceStreamReader):
    """The reader behind ``spark.readStream.format("stomp")`` (see the module docstring)."""

    def __init__(self, options: Dict[str, str]) -> None:
        self.conn = ConnectionOptions(options)
        self.destinations = get_list(options, "destinations", "destination")
        if not self.destinations:
            raise ConfigurationError("option 'destination' (or 'destinations', comma-separated) is required")
        self.ack = (get_str(options, "ack", "client-individual") or "").lower()
        if self.ack not in ACK_MODES:
            raise ConfigurationError(f"option 'ack' must be one of {', '.join(ACK_MODES)}, not {self.ack!r}")
        self.max_messages = get_int(options, "maxMessagesPerBatch", 1000)
        self.max_bytes = get_int(options, "maxBytesPerBatch", None)
        self.poll_timeout = get_float(options, "pollTimeout", 1.0, allow_zero=True)
        self.prefetch = get_int(options, "prefetch", 1000)
        self.sub_headers = prefixed(options, "header.")
        self._rt: Optional[_ReaderRuntime] = None
        self._lock = threading.Lock()

    # Nothing of the runtime crosses a pickle: it is rebuilt where it is used.
    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_rt"] = None
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def initialOffset(self) -> Dict[str, int]:
        return {"seq": 0}

    def _runtime(self, start: int) -> _ReaderRuntime:
        rt = self._rt
        if rt is not None and rt.failure is not None and not rt.pending and rt.queue.empty():
            rt.close()
            raise rt.failure
        if rt is None:
            rt = self._rt = _ReaderRuntime(self, start)
        return rt

    def read(self, start: Dict[str, int]) -> Tuple[Iterator[Tuple], Dict[str, int]]:
        begin = int(start["seq"])
        with self._lock:
            rt = self._runtime(begin)
            if begin > rt.seq:  # offsets restart from the checkpoint
                rt.seq = begin
            rt.ack_upto(begin)  # eager ack: the batch ending at `begin` is committed
            messages = rt.poll(self.max_messages, self.max_bytes, self.poll_timeout)
            now = datetime.datetime.now(_UTC).replace(tzinfo=None)
            rows = []
            for message in messages:
                rt.seq += 1
                rt.pending.append((rt.seq, message))
                rows.append((
                    message.destination,
                    message.message_id,
                    message.subscription,
                    dict(message.headers),
                    message.body,
                    now,
                ))
            end = {"seq": rt.seq if rows else begin}
        return iter(rows), end

    def readBetweenOffsets(self, start: Dict[str, int], end: Dict[str, int]) -> Iterator[Tuple]:
        # A replay of a batch that was planned but not committed before a restart. Its
        # messages were never acked, so the broker re-queued them and they come again
        # as new deliveries; there is nothing to replay here (and an executor cannot see
        # the driver's buffer anyway).
        log.info("stomp source: batch %s..%s is redelivered by the broker, not replayed", start, end)
        return iter([])

    def commit(self, end: Dict[str, int]) -> None:
        with self._lock:
            if self._rt is not None:
                self._rt.ack_upto(int(end["seq"]))

    def stop(self) -> None:
        with self._lock:
            rt, self._rt = self._rt, None
        if rt is not None:
            rt.close()  # unacked messages go back to the broker


# -- the writers -------------------------------------------------------------------------------


@dataclass
class StompCommitMessage(WriterCommitMessage):
    """What one write task reports: messages sent and confirmed, bytes of body, its partition."""

    partition: int
    sent: int
    confirmed: int
    body_bytes: int


def _columns(schema: StructType) -> Dict[str, int]:
    return {field.name.lower(): i for i, field in enumerate(schema.fields)}


class _WriterBase:
    def __init__(self, options: Dict[str, str], schema: StructType) -> None:
        self.conn = ConnectionOptions(options)
        cols = _columns(schema)
        if "body" not in cols:
            raise ConfigurationError("the stomp sink needs a 'body' column (binary or string)")
        self.body_col = cols["body"]
        self.dest_col = cols.get("destination")
        self.headers_col = cols.get("headers")
        self.destination = get_str(options, "destination")
        if self.dest_col is None and not self.destination:
            raise ConfigurationError("the stomp sink needs a 'destination' column or option")
        self.receipt_window = get_int(options, "receiptWindow", 1000)
        self.content_type = get_str(options, "contentType")
        self.extra_headers = prefixed(options, "header.")
        self.dedupe_header = get_str(options, "dedupeHeader")
        self.dedupe_id = get_str(options, "dedupeId") or uuid.uuid4().hex  # fixed on the driver
        self.last_commit: Optional[Dict[str, int]] = None

    def _key(self) -> Tuple[str, str, int]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        query = batch = None
        if ctx is not None:
            query = ctx.getLocalProperty("sql.streaming.queryId")
            batch = ctx.getLocalProperty("streaming.sql.batchId")
        return query or self.dedupe_id, batch or "0", partition

    def write(self, iterator: Iterator[Any]) -> StompCommitMessage:
        query, batch, partition = self._key()
        sent, confirmed, size = _send_rows(self, iterator, f"{query}/{batch}/{partition}/")
        return StompCommitMessage(partition=partition, sent=sent, confirmed=confirmed, body_bytes=size)

    def _aggregate(self, messages: Sequence[Optional[WriterCommitMessage]]) -> Dict[str, int]:
        total = {"partitions": 0, "sent": 0, "confirmed": 0, "body_bytes": 0}
        for m in messages:
            if isinstance(m, StompCommitMessage):
                total["partitions"] += 1
                total["sent"] += m.sent
                total["confirmed"] += m.confirmed
                total["body_bytes"] += m.body_bytes
        self.last_commit = total
        log.info("stomp sink committed %s", total)
        return total


#: Headers of a received MESSAGE that belong to that delivery, not to a message sent on:
#: dropped from a row's ``headers`` so that a STOMP -> Spark -> STOMP pipeline can pass them through.
DELIVERY_HEADERS = frozenset({
    "destination", "message-id", "subscription", "ack", "content-length", "receipt", "receipt-id",
    "transaction", "redelivered",
})

#: Rows handed to the event loop per crossing.
_CHUNK = 256


def _send_rows(w: _WriterBase, rows: Iterator[Any], dedupe_prefix: str) -> Tuple[int, int, int]:
    """Send every row with a receipt, at most ``receiptWindow`` outstanding; return once all are confirmed."""
    from .._sync import Client

    client = Client(**client_kwargs(w.conn))
    sent = confirmed = size = 0
    window: Deque[Any] = deque()
    limit = w.receipt_window
    with client:
        ac = client.async_client

        async def send_chunk(frames: List[Tuple[str, Any, Optional[Dict[str, str]]]]) -> int:
            done = 0
            for destination, body, headers in frames:
                receipt = await ac.send(destination, body, headers=headers, content_type=w.content_type,
                                        receipt=True, wait=False)
                window.append(receipt)
                while len(window) > limit:
                    await window.popleft().wait()
                    done += 1
            return done

        async def drain() -> int:
            done = 0
            while window:
                await window.popleft().wait()
                done += 1
            return done

        chunk: List[Tuple[str, Any, Optional[Dict[str, str]]]] = []
        index = 0
        for row in rows:
            body = row[w.body_col]
            if body is None:
                body = b""
            elif isinstance(body, bytearray):
                body = bytes(body)
            destination = row[w.dest_col] if w.dest_col is not None else None
            destination = destination or w.destination
            if not destination:
                raise ConfigurationError(f"row {index} has no destination and the 'destination' option is not set")
            headers: Optional[Dict[str, str]] = None
            if w.extra_headers or w.dedupe_header or (w.headers_col is not None and row[w.headers_col]):
                headers = dict(w.extra_headers)
                if w.headers_col is not None and row[w.headers_col]:
                    headers.update({
                        str(k): "" if v is None else str(v)
                        for k, v in row[w.headers_col].items()
                        if str(k).lower() not in DELIVERY_HEADERS
                    })
                if w.dedupe_header:
                    headers[w.dedupe_header] = f"{dedupe_prefix}{index}"
            chunk.append((destination, body, headers))
            size += len(body) if isinstance(body, bytes) else len(body.encode("utf-8"))
            index += 1
            if len(chunk) >= _CHUNK:
                confirmed += client.portal.call(send_chunk, chunk)
                sent += len(chunk)
                chunk = []
        if chunk:
            confirmed += client.portal.call(send_chunk, chunk)
            sent += len(chunk)
        confirmed += client.portal.call(drain)
    return sent, confirmed, size


class StompWriter(_WriterBase, DataSourceWriter):
    """``df.write.format("stomp")``: every row becomes one message, confirmed by a receipt."""

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._aggregate(messages)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        total = self._aggregate(messages)
        log.warning("stomp sink aborted; the tasks that finished had sent %s", total)


class StompStreamWriter(_WriterBase, DataSourceStreamWriter):
    """``writeStream.format("stomp")``: as :class:`StompWriter`, per micro-batch."""

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._aggregate(messages)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        total = self._aggregate(messages)
        log.warning("stomp sink aborted batch %s; the tasks that finished had sent %s", batchId, total)

