"""The writers of the ``stomp`` format: ``df.write`` and ``writeStream`` (Arrow in, confirmed SENDs out).

Theory of operation
-------------------
:class:`StompWriter` (a ``DataSourceArrowWriter``) and :class:`StompStreamWriter` (a
``DataSourceStreamArrowWriter``) get each task's rows as ``pyarrow.RecordBatch``\\ es.
A task opens one connection, turns each batch into frames column by column (no
per-row ``Row`` object) and hands the whole batch to the client's event loop in one
crossing, where the SENDs are queued back to back (the loop writes them in large
socket writes) while at most ``receiptWindow`` receipts are outstanding. The task
returns its :class:`StompCommitMessage` (counts) only when every message is confirmed;
a broker ERROR, a lost connection or a bad row fails the task with a message naming
the column, option or broker reply. The driver-side ``commit`` adds the counts up
(:attr:`StompWriter.last_commit`).

How a message is confirmed (option ``confirm``):

* ``receipt``: a receipt on every SEND. Correct on every broker. RabbitMQ sends a
  SEND's RECEIPT only once it has confirmed that message, and a receipt on one
  frame can overtake those of earlier SENDs, so a later receipt says nothing about
  the earlier frames there: every SEND needs its own.
* ``every``: a receipt on every ``receiptEvery``-th SEND and on the task's last one.
  Only for brokers that handle a connection's frames in order and refuse a SEND
  with an ERROR ahead of any later RECEIPT (ActiveMQ Classic, the in-process test
  broker): a receipt then confirms every frame before it. Refused on RabbitMQ.
* ``transaction``: ``receiptEvery`` SENDs per transaction, its COMMIT confirmed by a
  receipt (the broker delivers a transaction all or nothing). Refused on RabbitMQ
  for the same reason: its COMMIT's receipt can overtake the confirms of the SENDs
  it publishes.
* ``auto`` (the default): ``every`` on ActiveMQ and the in-process broker (by
  CONNECTED's ``server`` header), ``receipt`` everywhere else.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from ..errors import ConfigurationError
from ._options import ConnectionOptions, client_kwargs, get_bool, get_int, get_str, prefixed

__all__ = ["CONFIRM_MODES", "DELIVERY_HEADERS", "StompCommitMessage", "StompStreamWriter", "StompWriter"]

log = logging.getLogger("stompfast.spark")

CONFIRM_MODES = ("auto", "receipt", "every", "transaction")

#: Messages unconfirmed per task at most (docs/spark.md, "Throughput": 1,000-2,000 measured best on RabbitMQ).
DEFAULT_RECEIPT_WINDOW = 2000

#: ``server`` header prefixes of brokers that answer a connection's frames in order (``confirm=auto``).
IN_ORDER_SERVERS = ("ActiveMQ/", "stompfast-testing/")

#: Headers of a received MESSAGE that belong to that delivery, not to a message sent on:
#: dropped from a row's ``headers`` so that a STOMP -> Spark -> STOMP pipeline can pass them through.
DELIVERY_HEADERS = frozenset({
    "destination", "message-id", "subscription", "ack", "content-length", "receipt", "receipt-id",
    "transaction", "redelivered",
})


@dataclass
class StompCommitMessage(WriterCommitMessage):
    """What one write task reports: messages sent and confirmed, bytes of body, its partition, seconds sending."""

    partition: int
    sent: int
    confirmed: int
    body_bytes: int
    seconds: float = 0.0


class _WriterBase:
    def __init__(self, options: Dict[str, str], schema: StructType) -> None:
        self.conn = ConnectionOptions(options)
        fields = {field.name.lower(): (i, field.dataType) for i, field in enumerate(schema.fields)}
        if "body" not in fields:
            raise ConfigurationError("the stomp sink needs a 'body' column (binary or string); the columns are"
                                     f" {[f.name for f in schema.fields]}")
        self.body_col, body_type = fields["body"]
        if not isinstance(body_type, (BinaryType, StringType)):
            raise ConfigurationError(f"column 'body' must be binary or string, not {body_type.simpleString()}")
        self.body_is_text = isinstance(body_type, StringType)
        self.dest_col = fields["destination"][0] if "destination" in fields else None
        if self.dest_col is not None and not isinstance(fields["destination"][1], StringType):
            kind = fields["destination"][1].simpleString()
            raise ConfigurationError(f"column 'destination' must be string, not {kind}")
        self.headers_col = fields["headers"][0] if "headers" in fields else None
        if self.headers_col is not None:
            htype = fields["headers"][1]
            if not (isinstance(htype, MapType) and isinstance(htype.keyType, StringType)
                    and isinstance(htype.valueType, StringType)):
                raise ConfigurationError("column 'headers' must be map<string,string> (STOMP header values are"
                                         f" text: cast them), not {htype.simpleString()}")
        self.destination = get_str(options, "destination")
        if self.dest_col is None and not self.destination:
            raise ConfigurationError("the stomp sink needs a 'destination' column or option")
        self.receipt_window = get_int(options, "receiptWindow", DEFAULT_RECEIPT_WINDOW)
        self.confirm = (get_str(options, "confirm", "auto") or "").lower()
        if self.confirm not in CONFIRM_MODES:
            raise ConfigurationError(
                f"option 'confirm' must be one of {', '.join(CONFIRM_MODES)}, not {self.confirm!r}"
            )
        self.receipt_every = get_int(options, "receiptEvery", 100)
        self.content_type = get_str(options, "contentType")
        self.extra_headers = prefixed(options, "header.")
        self.dedupe_header = get_str(options, "dedupeHeader")
        # Fixed on the driver
        self.dedupe_id = get_str(options, "dedupeId") or uuid.uuid4().hex
        self.trace = get_bool(options, "trace", False)
        # Fail on the driver, before any task, when OpenTelemetry is missing
        if self.trace:
            try:
                import stompfast.otel  # noqa: F401
            except ImportError as exc:
                raise ConfigurationError(f"option trace=true: {exc}") from None
        self.last_commit: Optional[Dict[str, Any]] = None

    def _key(self) -> Tuple[str, str, int]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        query = batch = None
        if ctx is not None:
            query = ctx.getLocalProperty("sql.streaming.queryId")
            batch = ctx.getLocalProperty("streaming.sql.batchId")
        return query or self.dedupe_id, batch or "0", partition

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StompCommitMessage:
        query, batch, partition = self._key()
        t = time.perf_counter()
        sent, confirmed, size = _send_batches(self, iterator, f"{query}/{batch}/{partition}/")
        return StompCommitMessage(partition=partition, sent=sent, confirmed=confirmed, body_bytes=size,
                                  seconds=time.perf_counter() - t)

    def _aggregate(self, messages: Sequence[Optional[WriterCommitMessage]]) -> Dict[str, Any]:
        total: Dict[str, Any] = {"partitions": 0, "sent": 0, "confirmed": 0, "body_bytes": 0, "task_seconds": 0.0}
        for m in messages:
            if isinstance(m, StompCommitMessage):
                total["partitions"] += 1
                total["sent"] += m.sent
                total["confirmed"] += m.confirmed
                total["body_bytes"] += m.body_bytes
                total["task_seconds"] = max(total["task_seconds"], m.seconds)
        self.last_commit = total
        log.info("stomp sink committed %s", total)
        return total


def _columns(w: _WriterBase, batch: pa.RecordBatch, first_row: int) -> Tuple[List[str], List[bytes], List[Any]]:
    """A batch's destinations, bodies and header maps as lists; a bad value fails naming its column."""
    n = batch.num_rows
    body = batch.column(w.body_col)
    if body.null_count:
        row = first_row + body.is_null().index(True).as_py()
        raise ConfigurationError(f"column 'body' is null in row {row} of this task: a message needs a body"
                                 " (an empty string or binary is fine)")
    if w.body_is_text:
        # UTF-8 as it is
        body = pc.cast(body, pa.binary())
    bodies = body.to_pylist()
    if w.dest_col is not None:
        dcol = batch.column(w.dest_col)
        if dcol.null_count:
            if not w.destination:
                row = first_row + dcol.is_null().index(True).as_py()
                raise ConfigurationError(f"column 'destination' is null in row {row} of this task and the"
                                         " 'destination' option (the default for such rows) is not set")
            dcol = pc.fill_null(dcol, w.destination)
        dests = dcol.to_pylist()
        if not all(dests):
            row = first_row + dests.index("")
            raise ConfigurationError(f"column 'destination' is empty in row {row} of this task")
    else:
        dests = [w.destination] * n
    headers = batch.column(w.headers_col).to_pylist() if w.headers_col is not None else [None] * n
    return dests, bodies, headers


def _send_batches(w: _WriterBase, batches: Iterator[pa.RecordBatch], dedupe_prefix: str) -> Tuple[int, int, int]:
    """Send every row, confirmed as ``confirm`` says; return (sent, confirmed, body bytes) once all are confirmed."""
    if not w.trace:
        return _send_task(w, batches, dedupe_prefix, None)
    import stompfast.otel as otel

    # option trace: one PRODUCER span for the task (not one per row); its traceparent on every SEND
    provider = otel.tracer_provider_from_environment()
    span = otel.BatchSpan(w.destination if w.dest_col is None else None, tracer_provider=provider)
    tally: Dict[str, int] = {"sent": 0}
    try:
        result = _send_task(w, batches, dedupe_prefix, span.headers, tally)
    except BaseException as exc:
        span.end(tally["sent"], exc)
        otel.flush(provider)
        raise
    span.end(result[0])
    # A Python worker may be ended without exiting: export the task's span now
    otel.flush(provider)
    return result


def _send_task(w: _WriterBase, batches: Iterator[pa.RecordBatch], dedupe_prefix: str,
               trace_headers: Optional[Dict[str, str]], tally: Optional[Dict[str, int]] = None) -> Tuple[int, int, int]:
    """:func:`_send_batches` for one task; ``trace_headers`` go on every SEND (and win over a row's own)."""
    from .._sync import Client

    client = Client(**client_kwargs(w.conn))
    sent = confirmed = size = 0
    with client:
        confirm = w.confirm
        server = client.server or ""
        in_order = server.startswith(IN_ORDER_SERVERS)
        if confirm == "auto":
            confirm = "every" if in_order else "receipt"
        elif confirm in ("every", "transaction") and server.startswith("RabbitMQ/"):
            raise ConfigurationError(
                f"option confirm={confirm!r} is not safe on {server}: its receipts can overtake those of earlier"
                " SENDs, so only a receipt on every SEND confirms them (confirm=receipt or auto)")
        every = w.receipt_every if confirm != "receipt" else 1
        ac = client.async_client
        # Receipt, messages it confirms
        window: Deque[Tuple[Any, int]] = deque()
        limit = max(1, w.receipt_window // every)
        state: Dict[str, Any] = {"since": 0, "confirmed": 0, "tx": None}
        extra = w.extra_headers
        # A row's headers that are not sent on
        dropped = DELIVERY_HEADERS
        # The task's context replaces a row's own
        if trace_headers:
            extra = {**extra, **trace_headers}
            dropped = DELIVERY_HEADERS | {name.lower() for name in trace_headers}
        dedupe = w.dedupe_header
        content_type = w.content_type

        async def settle(n_keep: int) -> None:
            while len(window) > n_keep:
                receipt, count = window.popleft()
                await receipt.wait()
                state["confirmed"] += count

        async def send_batch(dests: List[str], bodies: List[bytes], headers: List[Any], first: int) -> None:
            n = len(bodies)
            for i in range(n):
                h: Optional[Dict[str, str]] = None
                row_headers = headers[i]
                if extra or dedupe or row_headers:
                    h = dict(extra)
                    if row_headers:
                        for k, v in row_headers:
                            if k.lower() not in dropped:
                                h[k] = "" if v is None else v
                    if dedupe:
                        h[dedupe] = f"{dedupe_prefix}{first + i}"
                state["since"] += 1
                if confirm == "transaction":
                    if state["tx"] is None:
                        tx = ac.transaction(receipt=True)
                        await tx.__aenter__()
                        state["tx"] = tx
                    await state["tx"].send(dests[i], bodies[i], headers=h, content_type=content_type)
                    if state["since"] >= every:
                        tx, state["tx"] = state["tx"], None
                        await tx.commit()
                        state["confirmed"] += state["since"]
                        state["since"] = 0
                    continue
                wants = state["since"] >= every
                receipt = await ac.send(dests[i], bodies[i], headers=h, content_type=content_type,
                                        receipt=wants, wait=False)
                if wants:
                    window.append((receipt, state["since"]))
                    state["since"] = 0
                    if len(window) > limit:
                        await settle(limit)

        async def finish() -> None:
            tx, state["tx"] = state["tx"], None
            # The last, partial transaction
            if tx is not None:
                await tx.commit()
            # SENDs after the last receipt: the broker handles frames in order,
            elif state["since"]:
                # So the receipt of flush's probe confirms them
                await ac.flush()
            state["confirmed"] += state["since"]
            state["since"] = 0
            await settle(0)

        index = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            dests, bodies, headers = _columns(w, batch, index)
            size += sum(map(len, bodies))
            client.portal.call(send_batch, dests, bodies, headers, index)
            index += len(bodies)
            sent += len(bodies)
            if tally is not None:
                tally["sent"] = sent
        client.portal.call(finish)
        confirmed = state["confirmed"]
    if confirmed != sent:  # pragma: no cover - a bookkeeping error, never a broker's
        raise RuntimeError(f"stomp sink: {sent} sent but {confirmed} confirmed")
    return sent, confirmed, size


class StompWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("stomp")``: every row becomes one message, confirmed (see ``confirm``)."""

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._aggregate(messages)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        total = self._aggregate(messages)
        log.warning("stomp sink aborted; the tasks that finished had sent %s", total)


class StompStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``writeStream.format("stomp")``: as :class:`StompWriter`, per micro-batch."""

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._aggregate(messages)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        total = self._aggregate(messages)
        log.warning("stomp sink aborted batch %s; the tasks that finished had sent %s", batchId, total)
