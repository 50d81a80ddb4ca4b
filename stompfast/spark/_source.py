"""The ``stomp`` Spark data source: a streaming reader (this module) and the writers (``_sink``).

Theory of operation
-------------------
**Reader** (:class:`StompStreamReader`, a ``SimpleDataSourceStreamReader``). Spark
runs ``initialOffset``/``read``/``commit`` in one long-lived Python process on the
driver per query, so the STOMP connections live there: the first ``read`` opens
``connections`` :class:`stompfast.Client`\\ s (whose loop threads serve heart-beats in
the background), each subscribing to every destination in a client ack mode with the
broker's prefetch set to ``prefetch``. Nothing is pushed through callbacks: the
messages wait in each subscription's buffer and ``read(start)`` takes them in bulk
(``Subscription.receive_batch``: whole runs of the buffer per call, no thread hop per
message). It waits up to ``pollTimeout`` for the first message, then keeps taking
while messages keep coming (a gap of ``batchLinger`` ends the batch), up to
``maxMessagesPerBatch`` / ``maxBytesPerBatch`` and at most ``pollTimeout`` more. So a
micro-batch holds what is available: a backlog drains in batches of up to the limit
(the broker refills the prefetch window while Spark processes the previous batch),
an idle stream commits a lone message after ``batchLinger``. With
``minMessagesPerBatch`` a batch smaller than that floor is not made: its messages wait,
un-acked, for the next trigger, until ``maxTriggerDelay`` passed since the last batch
(Kafka's ``minOffsetsPerTrigger`` and ``maxTriggerDelay``). The batch is returned as
one ``pyarrow.RecordBatch`` (built column by column: no per-row tuple for Spark to
convert), numbered with a per-query delivery counter (the offset is ``{"seq": n}``; a batch's end
offset also carries its figures, ``"batch"``, which the query's progress shows: see
:meth:`_ReaderRuntime.figures`),
and its messages are kept as *pending* until acked.

Admission control: PySpark runs a simple reader's ``read`` as its own admission
control (its wrapper answers ``getDefaultReadLimit`` with ``ReadAllAvailable`` and
does not pass a ``ReadLimit`` on), so the limits are this reader's options.

Acks (at-least-once): a message is acked only once Spark has committed the batch
that holds it. Spark calls ``commit(end)`` for batch N only when it plans batch N+1,
which never happens on an idle stream, and a batch that fills the broker's prefetch
window would then deadlock. So ``read(start)`` first acks every pending message
with ``seq <= start`` ("eager ack": Spark asks for data after ``start`` only once the
batch ending at ``start`` is committed), and ``commit(end)`` is the backstop. In
``client`` mode (the default, except on ActiveMQ: :func:`_default_ack`) that is one
cumulative ACK per subscription per batch (the last message of that subscription in
the batch: messages are taken from a subscription in delivery order, so it covers
exactly the batch's ones). Neither
``stop()`` (not reliably called) nor anything else acks the rest: when the process
dies, the broker re-queues what was never acked. ``readBetweenOffsets`` (a replay of
an uncommitted batch after a restart, run on an executor that cannot see the
driver's buffer) returns nothing: those messages were never acked and come back from
the broker as new deliveries. Offsets restart from the checkpointed ``start``.

**Exactly-once** (``exactlyOnce``, :mod:`stompfast.spark._log`): each batch is written to
a log under ``logLocation`` before its messages are acked (at once, confirmed by a
receipt), so ``read(start)`` returns a logged batch that begins at ``start`` and
``readBetweenOffsets`` reads a replayed batch back from the log: the same rows each
time. Redeliveries of logged messages whose acks were not confirmed are dropped by
``dedupKey``.

**Trigger.AvailableNow** (:class:`SupportsTriggerAvailableNow`): the reader drains
what the broker delivers; the first ``read`` that gets nothing within ``pollTimeout``
returns its ``start`` unchanged, which ends the query (that read has acked the last
batch first).

Nothing unpicklable is held by a data source, reader or writer: connections are
made inside the process that uses them and dropped from the pickled state.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Set, Tuple

import pyarrow as pa
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import ConfigurationError, ReceiveTimeout
from ._log import BatchLog, DedupKey
from ._options import (
    ACK_MODES,
    ConnectionOptions,
    client_kwargs,
    get_bool,
    get_float,
    get_int,
    get_list,
    get_str,
    prefixed,
)

__all__ = [
    "ARROW_READ_SCHEMA",
    "READ_SCHEMA",
    "StompDataSource",
    "StompStreamReader",
    "messages_to_arrow",
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

#: The same as Arrow (what PySpark expects from ``read``: timestamps in UTC, microseconds).
ARROW_READ_SCHEMA = pa.schema([
    pa.field("destination", pa.string()),
    pa.field("message_id", pa.string()),
    pa.field("subscription", pa.string()),
    pa.field("headers", pa.map_(pa.string(), pa.string())),
    pa.field("body", pa.binary()),
    pa.field("received_at", pa.timestamp("us", tz="UTC")),
])

_HEADERS_TYPE = ARROW_READ_SCHEMA.field("headers").type
_TIME_TYPE = ARROW_READ_SCHEMA.field("received_at").type

#: Defaults, chosen by measurement (docs/spark.md, "Throughput"): batches up to 50,000
#: messages, and a prefetch window twice that, so the broker refills one batch while
#: Spark processes the other.
DEFAULT_MAX_MESSAGES = 50_000
DEFAULT_LINGER = 0.05
#: RabbitMQ closes a connection whose oldest un-acked delivery is older than its consumer_timeout
#: (30 minutes by default; checked once a minute on 3.x, per message on 4.x quorum queues, never on
#: 4.x classic queues): a warning at half of it. docs/spark.md, "The brokers' clocks".
RABBITMQ_HOLD_WARNING = 900.0
RABBITMQ_CLOCK = (
    "RabbitMQ's consumer_timeout (30 minutes by default) closes the connection of a consumer that holds a"
    " delivery longer, and the query fails: shorten the batches or the trigger interval, raise consumer_timeout"
    " on the broker, or use exactlyOnce, which acks each batch as soon as it is logged (docs/spark.md)"
)
#: Exactly-once: seconds a confirmation of the acks waits for each connection's receipt.
ACK_CONFIRM_TIMEOUT = 60.0
#: ACKs sent on a connection before the broker must answer that it read them (one ACK per
#: message, ``client-individual``): a whole batch at once (50,000 ACKs, 2-4 MB) stalled
#: ActiveMQ Classic's connection for 30 s and more (docs/brokers.md, "ActiveMQ Classic:
#: a backlog and bursts of ACKs"). Sent in the background: a read does not wait for them.
ACK_STEP = 1000
#: Seconds a step of ACKs waits for the broker's answer before the rest go out unpaced.
ACK_STEP_TIMEOUT = 30.0
#: Seconds closing the reader lets the ACKs under way finish (the rest are redelivered).
ACK_CLOSE_WAIT = 10.0
#: With ``minMessagesPerBatch``: the longest a trigger waits for the floor (Kafka's default, 15 minutes).
DEFAULT_MAX_TRIGGER_DELAY = 900.0


def messages_to_arrow(messages: List[Any], received_at: Optional[datetime.datetime] = None) -> pa.RecordBatch:
    """The messages as one ``RecordBatch`` of :data:`ARROW_READ_SCHEMA` (one pass, column by column)."""
    n = len(messages)
    dests: List[Optional[str]] = [None] * n
    ids: List[Optional[str]] = [None] * n
    subs: List[Optional[str]] = [None] * n
    bodies: List[bytes] = [b""] * n
    offsets = [0] * (n + 1)
    keys: List[str] = []
    values: List[str] = []
    extend_keys, extend_values = keys.extend, values.extend
    for i, m in enumerate(messages):
        headers = m.headers
        dests[i] = headers.get("destination")
        ids[i] = m.message_id
        subs[i] = m.subscription
        bodies[i] = m.body
        extend_keys(headers.keys())
        extend_values(headers.values())
        offsets[i + 1] = len(keys)
    when = received_at or datetime.datetime.now(datetime.timezone.utc)
    micros = int(when.timestamp() * 1_000_000)
    columns = [
        pa.array(dests, pa.string()),
        pa.array(ids, pa.string()),
        pa.array(subs, pa.string()),
        pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                pa.array(values, pa.string()), type=_HEADERS_TYPE),
        pa.array(bodies, pa.binary()),
        pa.repeat(pa.scalar(micros, _TIME_TYPE), n) if n else pa.array([], _TIME_TYPE),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_READ_SCHEMA)


class StompDataSource(DataSource):
    """``format("stomp")``: streaming reader (``readStream``), batch and streaming writer (``write``)."""

    @classmethod
    def name(cls) -> str:
        return "stomp"

    def schema(self) -> StructType:
        return READ_SCHEMA

    def simpleStreamReader(self, schema: StructType) -> "StompStreamReader":
        return StompStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from ._sink import StompWriter

        return StompWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from ._sink import StompStreamWriter

        return StompStreamWriter(dict(self.options), schema)


# -- the streaming reader --------------------------------------------------------------------


def _default_ack(server: Optional[str]) -> str:
    """The ack mode when the ``ack`` option is not set: by broker (CONNECTED's ``server`` header).

    ActiveMQ Classic pages a backlog in by about 200 messages and pages in more when an
    ACK arrives, whatever the prefetch (docs/brokers.md, "ActiveMQ Classic"): one
    cumulative ``client`` ACK per batch caps every micro-batch at about 200, while
    ``client-individual``'s ACK per message keeps the backlog coming. Elsewhere
    (RabbitMQ, ...) ``client``: one ACK per subscription per batch.
    """
    return "client-individual" if (server or "").startswith("ActiveMQ/") else "client"


class _ReaderRuntime:
    """The connections, subscriptions and pending messages of a reader: lives only in the driver process."""

    def __init__(self, reader: "StompStreamReader", seq: int) -> None:
        from .._sync import Client

        self.reader = reader
        # The last delivery number handed out
        self.seq = seq
        #: batches taken and not acked yet, in order: (last seq of the batch, its messages, monotonic s taken)
        self.pending: Deque[Tuple[int, List[Any], float]] = deque()
        # (monotonic s) the last read: what the broker delivered since waits un-acked in the buffer
        self.last_read = time.monotonic()
        # The broker's own limit on un-acked deliveries, where it has one by default (see held_too_long)
        self.clock: Optional[Tuple[float, str]] = None
        # Taken but left for the next batch (byte limit), in order
        self.held: List[Any] = []
        self.clients: List[Any] = []
        self.subs: List[Any] = []
        try:
            for c in range(reader.connections):
                client = Client(**client_kwargs(reader.conn))
                self.clients.append(client)
                client.connect()
                self.ack = reader.ack or _default_ack(client.server)
                for d, destination in enumerate(reader.destinations):
                    self.subs.append(client.subscribe(
                        destination,
                        ack=self.ack,
                        headers=reader.sub_headers or None,
                        buffer_size=reader.prefetch,
                        # Unique across the connections: the cumulative acks rely on it
                        id=f"stompfast-{c}-{d}",
                    ))
        except BaseException:
            self.close()
            raise
        self._turn = 0
        if (self.clients[0].server or "").startswith("RabbitMQ/"):
            self.clock = (RABBITMQ_HOLD_WARNING, RABBITMQ_CLOCK)
        # The thread that sends paced ACKs and confirms exactly-once batches (_worker)
        self._ack_thread: Optional[Any] = None
        # Its last job of paced ACKs (a Future), and whether close() began: paced ACKs stop waiting then
        self._last_job: Optional[Any] = None
        self.closing = False
        # (monotonic s) when the last batch was made: the floor's delay counts from it
        self.last_batch = time.monotonic()
        # Exactly-once: the keys of logged messages whose acks the broker may not have
        # seen (the last run died before its receipt): their redeliveries are dropped
        self.seen: Set[str] = set()
        if reader.log is not None:
            server = self.clients[0].server or ""
            if reader.dedup.header is None and not server.startswith("ActiveMQ/"):
                self.close()
                raise ConfigurationError(
                    f"dedupKey 'message-id' cannot recognise a redelivery on this broker ({server or 'unknown'}):"
                    " it gives a redelivered message a new message-id (RabbitMQ and Artemis do); use"
                    " 'header:NAME', a header every producer sets uniquely")
            self.seen = reader.log.unacked_keys(reader.dedup.of_rows)

    def _sweep(self, room: int, out: List[Any]) -> int:
        """Take what is buffered in every subscription, up to ``room`` messages; how many were taken."""
        taken = 0
        for sub in self.subs:
            if taken >= room:
                break
            if sub.pending:
                batch = sub.receive_batch(room - taken, timeout=0)
                out.extend(batch)
                taken += len(batch)
        return taken

    def _wait_first(self, room: int, out: List[Any], deadline: float) -> int:
        """Wait until some subscription has a message (or ``deadline``); take it and the others' buffers."""
        subs = self.subs
        while True:
            taken = self._sweep(room, out)
            if taken:
                return taken
            left = deadline - time.monotonic()
            if left <= 0:
                return 0
            sub = subs[self._turn % len(subs)]
            self._turn += 1
            # One subscription: wait all the time left; several: short turns on each
            try:
                batch = sub.receive_batch(room, timeout=left if len(subs) == 1 else min(left, 0.01))
            except ReceiveTimeout:
                continue
            out.extend(batch)
            return len(batch) + self._sweep(room - len(batch), out)

    def poll(self, max_messages: int, max_bytes: Optional[int], timeout: float, linger: float) -> List[Any]:
        """Take one batch: wait up to ``timeout`` for the first message, then while messages keep coming."""
        # Left over by the byte limit: they come first, nothing to wait for
        taken: List[Any] = self.held
        self.held = []
        if not taken:
            self._wait_first(max_messages, taken, time.monotonic() + timeout)
        if taken:
            size = sum(len(m.body) for m in taken) if max_bytes is not None else 0
            end = time.monotonic() + timeout
            quiet_since = time.monotonic()
            while len(taken) < max_messages and (max_bytes is None or size < max_bytes):
                now = time.monotonic()
                if now >= end or now - quiet_since >= linger:
                    break
                before = len(taken)
                if not self._sweep(max_messages - before, taken):
                    self._wait_first(max_messages - before, taken, min(end, quiet_since + linger))
                if len(taken) > before:
                    quiet_since = time.monotonic()
                    if max_bytes is not None:
                        size += sum(len(m.body) for m in taken[before:])
        if max_bytes is not None and len(taken) > 1:
            size = 0
            for i, message in enumerate(taken):
                size += len(message.body)
                if size > max_bytes and i > 0:
                    self.held = taken[i:]
                    del taken[i:]
                    break
        return taken

    def held_too_long(self) -> None:
        """Warn when deliveries have waited un-acked near a limit the broker enforces by default.

        Called by each read, before its acks: the oldest pending batch was taken one read
        ago (exactly-once acks at once, so only the buffer waits: since the last read).
        """
        now = time.monotonic()
        oldest = self.pending[0][2] if self.pending else self.last_read
        self.last_read = now
        if self.clock is not None and now - oldest > self.clock[0]:
            log.warning("stomp source: deliveries were held un-acked for %.0f s between two reads (a long batch or"
                        " trigger interval); %s", now - oldest, self.clock[1])

    def figures(self, batch: List[Any], acked: int) -> Dict[str, int]:
        """What a pipeline owner reads of a batch (its end offset's ``batch``; docs/spark.md, "Progress").

        ``acked``: messages this read acked (the batch before, or this one in exactly-once
        mode). ``buffered``: delivered and not in a batch yet; ``unacked``: in batches
        taken and not acked. Both are un-acked on the broker.
        """
        figures = {
            "messages": len(batch),
            "bytes": sum(len(m.body) for m in batch),
            "redelivered": sum(1 for m in batch if m.redelivered),
            "acked": acked,
            "buffered": sum(sub.pending for sub in self.subs) + len(self.held),
            "unacked": sum(len(entry[1]) for entry in self.pending),
        }
        log.info("stomp source: batch %s", figures)
        return figures

    def ack_upto(self, seq: int) -> int:
        """Ack every pending message numbered ``<= seq``, one loop crossing per connection; how many."""
        done: List[Any] = []
        pending = self.pending
        while pending and pending[0][0] <= seq:
            done.extend(pending.popleft()[1])
        self.send_acks(done)
        return len(done)

    def send_acks(self, messages: List[Any]) -> None:
        """Queue the ACKs of ``messages`` behind the client's frames (no wait on its loop).

        Cumulative (``client``): the last message of each subscription, at once. One ACK
        per message: more than ``ACK_STEP`` go out from the worker thread, ``ACK_STEP`` at
        a time, each step once the broker answered a probe sent after the one before.
        """
        mode = self.ack
        if not messages or mode == "auto":
            return
        # Cumulative: the last one of each subscription covers the rest
        if mode == "client":
            last: Dict[str, Any] = {}
            # Subscription ids are unique across this reader's connections
            for message in messages:
                last[message.subscription] = message
            for message in last.values():
                message.ack()
            return
        if len(messages) <= ACK_STEP and self._acks_done():
            for message in messages:
                message.ack()
            return
        self._last_job = self._worker().submit(self._paced_acks, list(messages))

    def _paced_acks(self, messages: List[Any]) -> None:
        """(The worker thread.) ACK ``messages`` ``ACK_STEP`` at a time, each step after the broker read the last."""
        clients = list(self.clients)
        wait = True
        try:
            for start in range(0, len(messages), ACK_STEP):
                if start and wait and not self.closing:
                    try:
                        for client in clients:
                            client.flush(timeout=ACK_STEP_TIMEOUT)
                    except Exception as exc:
                        # The connection's own failure, if it is one, reaches the next read
                        log.info("stomp source: no answer to the ACKs sent (%s: %s); the rest go out unpaced",
                                 type(exc).__name__, exc)
                        wait = False
                for message in messages[start:start + ACK_STEP]:
                    message.ack()
        except Exception as exc:
            # A lost connection: the broker redelivers what was not acked
            log.info("stomp source: ACKs stopped (%s: %s); the broker redelivers the rest", type(exc).__name__, exc)

    def _worker(self) -> Any:
        """The thread that sends paced ACKs and confirms exactly-once batches, one job after another."""
        if self._ack_thread is None:
            from concurrent.futures import ThreadPoolExecutor

            self._ack_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stompfast-spark-acks")
        return self._ack_thread

    def _acks_done(self) -> bool:
        """No paced ACKs under way: a few ACKs then go out at once instead of queueing behind them."""
        return self._last_job is None or self._last_job.done()

    def confirm_acks(self, batch_log: BatchLog, end: int) -> None:
        """Mark the log acked through ``end`` once every connection's broker confirmed the ACKs sent so far.

        In a thread of its own, one batch after another: a receipt cannot arrive while a
        full subscription buffer stops the reader, and only the next ``read`` drains it.
        A confirmation that fails leaves its batches to the next one, which covers them
        (the probe of ``flush`` follows every frame sent before it).
        """
        clients = list(self.clients)

        def confirm() -> None:
            try:
                for client in clients:
                    client.flush(timeout=ACK_CONFIRM_TIMEOUT)
                batch_log.mark_acked(end)
            except Exception as exc:
                log.info("stomp source: the acks through %d are not confirmed yet (%s: %s); the next batch's will be",
                         end, type(exc).__name__, exc)

        # Not waited for by close(): a confirmation ends with its connection
        self._worker().submit(confirm)

    def close(self) -> None:
        self.closing = True
        if self._ack_thread is not None:
            # ACKs under way go out without waiting for answers now; a confirmation ends with its connection
            if self._last_job is not None:
                try:
                    self._last_job.result(timeout=ACK_CLOSE_WAIT)
                except Exception:
                    log.debug("stomp source: the ACKs under way did not finish before closing", exc_info=True)
            self._ack_thread.shutdown(wait=False, cancel_futures=True)
        for client in self.clients:
            try:
                client.close()
            except Exception:  # pragma: no cover - closing is best effort; the broker re-queues
                log.debug("stomp source: closing a connection failed", exc_info=True)


class StompStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader behind ``spark.readStream.format("stomp")`` (see the module docstring)."""

    def __init__(self, options: Dict[str, str]) -> None:
        self.conn = ConnectionOptions(options)
        self.destinations = get_list(options, "destinations", "destination")
        if not self.destinations:
            raise ConfigurationError("option 'destination' (or 'destinations', comma-separated) is required")
        # "": by broker, see _default_ack
        self.ack = (get_str(options, "ack", "") or "").lower()
        if self.ack and self.ack not in ACK_MODES:
            raise ConfigurationError(f"option 'ack' must be one of {', '.join(ACK_MODES)}, not {self.ack!r}")
        self.max_messages = get_int(options, "maxMessagesPerBatch", DEFAULT_MAX_MESSAGES)
        self.max_bytes = get_int(options, "maxBytesPerBatch", None)
        self.poll_timeout = get_float(options, "pollTimeout", 1.0, allow_zero=True)
        self.linger = get_float(options, "batchLinger", DEFAULT_LINGER, allow_zero=True)
        self.prefetch = get_int(options, "prefetch", 2 * self.max_messages)
        self.connections = get_int(options, "connections", 1)
        # The floor: fewer messages wait for the next trigger, until maxTriggerDelay passed
        self.min_messages = get_int(options, "minMessagesPerBatch", None)
        self.max_trigger_delay = get_float(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY)
        if self.min_messages is not None and self.min_messages > min(self.max_messages, self.prefetch):
            raise ConfigurationError(
                f"option 'minMessagesPerBatch' ({self.min_messages}) must not exceed maxMessagesPerBatch"
                f" ({self.max_messages}) or prefetch ({self.prefetch}): the broker stops at the prefetch window")
        self.sub_headers = prefixed(options, "header.")
        # Exactly-once (stompfast.spark._log): every batch logged before its acks
        location = get_str(options, "logLocation")
        if get_bool(options, "exactlyOnce", False):
            if location is None:
                raise ConfigurationError("option 'exactlyOnce' needs 'logLocation': a directory every executor can"
                                         " read, e.g. beside the query's checkpoint location")
            self.log: Optional[BatchLog] = BatchLog(location)
        elif location is not None:
            raise ConfigurationError("option 'logLocation' is only used with exactlyOnce=true")
        else:
            self.log = None
        dedup = get_str(options, "dedupKey")
        if self.log is not None and dedup is None:
            raise ConfigurationError(
                "option 'exactlyOnce' needs 'dedupKey': 'header:NAME' (a header every producer sets uniquely), or"
                " 'message-id' on ActiveMQ Classic, which keeps a message's id across redeliveries")
        self.dedup = DedupKey(dedup or "message-id")
        self.available_now = False
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

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: the first read that finds nothing within ``pollTimeout`` ends the query."""
        self.available_now = True

    def _runtime(self, start: int) -> _ReaderRuntime:
        if self._rt is None:
            self._rt = _ReaderRuntime(self, start)
        return self._rt

    def _take(self, rt: _ReaderRuntime) -> List[Any]:
        """One batch's messages, or none while the floor (``minMessagesPerBatch``) holds them back."""
        messages = rt.poll(self.max_messages, self.max_bytes, self.poll_timeout, self.linger)
        if (self.min_messages is not None and messages and len(messages) < self.min_messages
                and not self.available_now and time.monotonic() - rt.last_batch < self.max_trigger_delay):
            # Too few, and the delay is not over: they wait, un-acked, for the next trigger
            rt.held = messages + rt.held
            return []
        if messages:
            rt.last_batch = time.monotonic()
        return messages

    def read(self, start: Dict[str, Any]) -> Tuple[Iterator[pa.RecordBatch], Dict[str, Any]]:
        begin = int(start["seq"])
        if self.log is not None:
            return self._read_logged(start, begin, self.log)
        with self._lock:
            rt = self._runtime(begin)
            # Offsets restart from the checkpoint
            if begin > rt.seq:
                rt.seq = begin
            rt.held_too_long()
            # Eager ack: the batch ending at `begin` is committed
            acked = rt.ack_upto(begin)
            messages = self._take(rt)
            if not messages:
                # The start itself: an end equal to it is how Spark sees that nothing came
                return iter([]), start
            rt.seq += len(messages)
            rt.pending.append((rt.seq, messages, time.monotonic()))
            batch = messages_to_arrow(messages)
            return iter([batch]), {"seq": rt.seq, "batch": rt.figures(messages, acked)}

    def _read_logged(
        self, start: Dict[str, Any], begin: int, log: BatchLog,
    ) -> Tuple[Iterator[pa.RecordBatch], Dict[str, Any]]:
        """:meth:`read` in exactly-once mode: the logged batch at ``begin``, or a new one logged, then acked."""
        with self._lock:
            logged = log.find(begin)
            if logged is not None:
                # The last run logged this batch and died before Spark planned it: the same rows again
                end, batch = logged
                return iter([batch]), {"seq": end, "batch": {"messages": batch.num_rows, "from_log": True}}
            rt = self._runtime(begin)
            rt.held_too_long()
            messages = self._take(rt)
            key = self.dedup.of_message
            fresh = [m for m in messages if key(m) not in rt.seen] if rt.seen else messages
            if not fresh:
                # Only redeliveries of logged messages (or nothing): acked again, nothing new
                rt.send_acks(messages)
                return iter([]), start
            end = begin + len(fresh)
            batch = messages_to_arrow(fresh)
            log.write(begin, end, batch)
            # From here the log holds the batch: the broker may let go of it
            rt.send_acks(messages)
            rt.confirm_acks(log, end)
            # Spark asks for data after `begin` only once the batch ending there is committed
            log.prune(begin)
            figures = rt.figures(fresh, len(messages))
            figures["dropped"] = len(messages) - len(fresh)
            return iter([batch]), {"seq": end, "batch": figures}

    def readBetweenOffsets(self, start: Dict[str, int], end: Dict[str, int]) -> Iterator[Any]:
        if self.log is not None:
            # Exactly-once: the batch as it was logged, on whichever executor replays it
            return iter([self.log.read(int(start["seq"]), int(end["seq"]))])
        # A replay of a batch that was planned but not committed before a restart. Its
        # messages were never acked, so the broker re-queued them and they come again
        # as new deliveries; there is nothing to replay here (and an executor cannot see
        # the driver's buffer anyway).
        log.info("stomp source: batch %s..%s is redelivered by the broker, not replayed", start, end)
        return iter([])

    def commit(self, end: Dict[str, int]) -> None:
        if self.log is not None:
            self.log.prune(int(end["seq"]))
            return
        with self._lock:
            if self._rt is not None:
                self._rt.ack_upto(int(end["seq"]))

    def stop(self) -> None:
        with self._lock:
            rt, self._rt = self._rt, None
        if rt is not None:
            # Unacked messages go back to the broker
            rt.close()


# Shown as stompfast.spark.StompDataSource, the name users import (reprs, help(); cloudpickle
# ships the class to executors by that name), as stompfast/__init__.py does
# for its names; set here because stompfast.spark imports this module only on first use.
StompDataSource.__module__ = "stompfast.spark"
