"""Spans: a PRODUCER span per SEND (its context injected into the frame's headers), a CONSUMER span per message.

How it hooks in, at no cost to a client that is not instrumented (docs/observability.md):

* the client's ``send``, ``send_nowait`` (async), ``subscribe``, ``transaction``, and the
  blocking client's ``ack`` and ``nack`` are shadowed on the one client object by instance attributes
  (:func:`async_client_methods`, :func:`sync_client_methods`): the class and every
  other client are untouched;
* a subscription returned by the traced ``subscribe`` is re-classed to
  :class:`TracedAsyncSubscription` / :class:`TracedSubscription` (subclasses that
  add nothing to the layout), which start a span for each message handed out and
  turn ``ack_message`` / ``nack_message`` (what ``message.ack()`` calls) into events;
* a ``callback=`` of the blocking client is wrapped: it runs inside a ``process``
  span, current in the callback's thread.

Span model (OpenTelemetry messaging semantic conventions, ``messaging.system = "stomp"``):

* ``send {destination}``, PRODUCER, ``messaging.operation.type = send``; it ends when
  the frame is queued, or with a receipt when the broker confirmed it (event
  ``stomp.receipt``) or refused it (the error recorded);
* ``receive {destination}`` (a message taken with ``receive``, iteration, a batch),
  CONSUMER, ``messaging.operation.type = receive``; ``process {destination}`` (a
  ``callback=``), ``messaging.operation.type = process``. Its parent is the producer's
  span (from the message's ``traceparent``), and it is linked to it, too; with
  ``link_only=True`` the parent is the ambient context instead and only the link ties
  the two. In ``auto`` ack mode a receive span ends at once (there is nothing to
  settle); in the ``client`` modes it stays open until the message is settled: ACK or
  NACK add an event (``stomp.ack`` / ``stomp.nack``, ``messaging.operation.type =
  settle``), a receipt for it another (``stomp.receipt``), then it ends. A ``client``
  mode ACK covers every earlier message: their spans end with the event too
  (``stomp.cumulative = true``). Messages never settled end with ``stomp.unsettled``
  when their subscription closes (or past :data:`OPEN_SPANS_LIMIT` per subscription).
  A process span ends when the callback returns.

A tracer that raises never fails the call it traces: the call goes on untraced and the
failure is logged (the first at WARNING, later ones at DEBUG).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from opentelemetry import context as otel_context, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from .. import AsyncClient, AsyncSubscription, Client, Message, Receipt, ReceiptFuture, Subscription, SyncMessage
from ..errors import ClientClosedError
from ._setup import finish_span

log = logging.getLogger("stompfast.otel")

#: Messages of one subscription whose span may stay open waiting for an ACK or NACK; past it the oldest ends.
OPEN_SPANS_LIMIT = 10_000

#: The span events this module adds.
TRACED_EVENTS = ("stomp.ack", "stomp.nack", "stomp.receipt", "stomp.unsettled")

SYSTEM = "stomp"
Attributes = Dict[str, AttributeValue]

# The consumer span of every message handed out by a traced subscription (for span_of / context_of).
_spans: "weakref.WeakKeyDictionary[Message, Span]" = weakref.WeakKeyDictionary()


def span_of(message: Message) -> Span:
    """The CONSUMER span of a message a traced subscription handed out (``INVALID_SPAN`` for any other).

    It may have ended already (``auto`` ack mode, or settled); it still serves as a parent.
    """
    return _spans.get(message, INVALID_SPAN)


def context_of(message: Message) -> Context:
    """A context whose current span is the message's CONSUMER span: parent your own work on it.

    ``with tracer.start_as_current_span("handle", context=stompfast.otel.context_of(message)): ...``
    """
    return trace.set_span_in_context(span_of(message))


def _body_size(body: Any) -> Optional[int]:
    if isinstance(body, (bytes, bytearray)):
        return len(body)
    if isinstance(body, memoryview):
        return body.nbytes
    if isinstance(body, str):
        return len(body) if body.isascii() else len(body.encode("utf-8"))
    return None


class Tracing:
    """What the traced methods of one client share: the tracer, the propagator, the failure log."""

    def __init__(self, client: Union[AsyncClient, Client], tracer: Tracer, propagator: TextMapPropagator,
                 link_only: bool) -> None:
        self.tracer = tracer
        self.propagator = propagator
        self.link_only = link_only
        self.client = weakref.ref(client)
        self.failures = 0
        self.subscriptions: "weakref.WeakSet[SubscriptionTrace]" = weakref.WeakSet()

    def failed(self, doing: str) -> None:
        """(In an ``except``.) The tracer raised: log it, the first time loudly."""
        self.failures += 1
        if self.failures == 1:
            log.warning("the OpenTelemetry tracer raised while %s; the call goes on untraced (further failures"
                        " are logged at DEBUG)", doing, exc_info=True)
        else:
            log.debug("the OpenTelemetry tracer raised while %s", doing, exc_info=True)

    def common(self, destination: Optional[str], operation: str, kind: str) -> Attributes:
        attributes: Attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": kind,
            "messaging.operation.name": operation,
        }
        if destination is not None:
            attributes["messaging.destination.name"] = destination
        client = self.client()
        endpoint = getattr(client, "endpoint", None) if client is not None else None
        if endpoint is not None:
            attributes["server.address"] = endpoint.host
            attributes["server.port"] = endpoint.port
        return attributes

    # -- producer ---------------------------------------------------------------------------

    def start_send(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], transaction: Optional[str] = None
    ) -> Tuple[Optional[Span], Optional[Mapping[str, Any]]]:
        """A PRODUCER span and the headers carrying its context; ``(None, headers)`` when the tracer failed."""
        span: Optional[Span] = None
        try:
            attributes = self.common(destination, "send", "send")
            size = _body_size(body)
            if size is not None:
                attributes["messaging.message.body.size"] = size
            if transaction is not None:
                attributes["stomp.transaction"] = transaction
            span = self.tracer.start_span(f"send {destination}", kind=SpanKind.PRODUCER, attributes=attributes)
            carrier: Dict[str, Any] = dict(headers) if headers else {}
            self.propagator.inject(carrier, context=trace.set_span_in_context(span))
            return span, carrier
        except Exception:
            self.failed("starting a send span")
            if span is not None:
                self.end(span)
            return None, headers

    # -- consumer ---------------------------------------------------------------------------

    def start_consumer(self, message: Message, operation: str, destination: str) -> Optional[Span]:
        """The CONSUMER span of ``message``: a child of the producer's (unless ``link_only``), linked to it."""
        try:
            headers = message.headers
            producer_context = self.propagator.extract(headers)
            producer = trace.get_current_span(producer_context).get_span_context()
            links = [Link(producer)] if producer.is_valid else None
            parent = producer_context if producer.is_valid and not self.link_only else None
            where = message.destination or destination
            attributes = self.common(where, operation, operation)
            attributes["messaging.destination.subscription.name"] = message.subscription
            if message.message_id is not None:
                attributes["messaging.message.id"] = message.message_id
            # (an oversized message was skipped unread: its body raises, its size is known)
            attributes["messaging.message.body.size"] = (
                int(message.headers["content-length"]) if message.oversized else len(message.body)
            )
            correlation = headers.get("correlation-id")
            if correlation is not None:
                attributes["messaging.message.conversation_id"] = correlation
            if message.redelivered:
                attributes["stomp.redelivered"] = True
            return self.tracer.start_span(f"{operation} {where}", context=parent, kind=SpanKind.CONSUMER,
                                          attributes=attributes, links=links)
        except Exception:
            self.failed("starting a consumer span")
            return None

    def trace_of(self, message: Message) -> Optional["SubscriptionTrace"]:
        """The traced subscription holding ``message``'s open span (for ``client.ack(message)``)."""
        for sub in list(self.subscriptions):
            if sub.holds(message):
                return sub
        return None

    # -- ending -----------------------------------------------------------------------------

    def event(self, span: Optional[Span], name: str, attributes: Optional[Attributes] = None) -> None:
        if span is None:
            return
        try:
            span.add_event(name, attributes)
        except Exception:
            self.failed(f"adding the event {name}")

    def end(self, span: Optional[Span], error: Optional[BaseException] = None) -> None:
        if span is None:
            return
        try:
            finish_span(span, error)
        except Exception:
            self.failed("ending a span")

    def end_with_receipt(self, span: Optional[Span], receipt_id: Optional[str], error: Optional[BaseException]) -> None:
        """End a send span when its receipt came (event ``stomp.receipt``) or failed (the error)."""
        if error is None:
            self.event(span, "stomp.receipt", {"stomp.receipt.id": receipt_id or ""})
        self.end(span, error)


class SubscriptionTrace:
    """The spans of one subscription's messages: started when taken, ended when settled (or at once in auto)."""

    def __init__(self, tracing: Tracing, destination: str, ack_mode: str, operation: str) -> None:
        self.tracing = tracing
        self.destination = destination
        self.ack_mode = ack_mode
        # "receive" (pulled) or "process" (a callback)
        self.operation = operation
        # Spans waiting for their settlement
        self.open: "OrderedDict[Message, Span]" = OrderedDict()
        # The blocking client's threads take and ack concurrently
        self.lock = threading.Lock()
        tracing.subscriptions.add(self)

    def holds(self, message: Message) -> bool:
        return message in self.open

    def took(self, message: Message) -> None:
        """A message was handed out: start its span (once: a receive inside an iteration is one take)."""
        if message in _spans:
            return
        span = self.tracing.start_consumer(message, self.operation, self.destination)
        if span is None:
            return
        _spans[message] = span
        if self.ack_mode == "auto" and self.operation == "receive":
            # Nothing will settle it
            self.tracing.end(span)
            return
        with self.lock:
            self.open[message] = span
            overflow = self.open.popitem(last=False)[1] if len(self.open) > OPEN_SPANS_LIMIT else None
        if overflow is not None:
            self.tracing.event(overflow, "stomp.unsettled", {"stomp.reason": "too many unsettled messages"})
            self.tracing.end(overflow)

    def begin_process(self, message: Message) -> Optional[object]:
        """A callback is about to get ``message``: start its process span and make it current."""
        self.took(message)
        span = self.open.get(message)
        if span is None:
            return None
        try:
            return otel_context.attach(trace.set_span_in_context(span))
        except Exception:
            self.tracing.failed("entering a process span")
            return None

    def end_process(self, message: Message, token: Optional[object], error: Optional[BaseException]) -> None:
        if token is not None:
            try:
                otel_context.detach(token)  # type: ignore[arg-type]  # (the token attach returned)
            except Exception:
                self.tracing.failed("leaving a process span")
        with self.lock:
            span = self.open.pop(message, None)
        self.tracing.end(span, error)

    def settling(self, message: Message, command: str, transaction: Optional[str]) -> None:
        """An ACK or NACK of ``message`` is being sent: an event on its span."""
        span = self.open.get(message)
        if span is not None:
            self.tracing.event(span, f"stomp.{command}", self.settle_attributes(command, transaction))

    def settled(self, message: Message, command: str, receipt: bool, error: Optional[BaseException]) -> None:
        """The ACK or NACK went out (and, with ``receipt``, was confirmed), or failed with ``error``."""
        tracing = self.tracing
        # The callback's end ends the span
        if self.operation == "process":
            span = self.open.get(message)
            if error is not None:
                tracing.event(span, f"stomp.{command}.failed", {"error.type": type(error).__qualname__})
            elif receipt:
                tracing.event(span, "stomp.receipt")
            return
        covered: List[Span] = []
        with self.lock:
            if message in self.open and error is None and self.ack_mode == "client":
                # STOMP: in ack mode client "the ACK is cumulative": every message handed out before
                # this one is settled too (the open spans are in the order the messages were taken)
                while True:
                    earlier = next(iter(self.open))
                    if earlier is message:
                        break
                    covered.append(self.open.pop(earlier))
            span = self.open.pop(message, None)
        for other in covered:
            attributes = self.settle_attributes(command, None)
            attributes["stomp.cumulative"] = True
            tracing.event(other, f"stomp.{command}", attributes)
            tracing.end(other)
        if span is not None:
            if error is None and receipt:
                tracing.event(span, "stomp.receipt")
            tracing.end(span, error)

    @staticmethod
    def settle_attributes(command: str, transaction: Optional[str]) -> Attributes:
        attributes: Attributes = {"messaging.operation.type": "settle", "messaging.operation.name": command}
        if transaction is not None:
            attributes["stomp.transaction"] = transaction
        return attributes

    def close(self) -> None:
        """The subscription is closed: end what was never settled."""
        with self.lock:
            spans = list(self.open.values())
            self.open.clear()
        for span in spans:
            self.tracing.event(span, "stomp.unsettled", {"stomp.reason": "subscription closed"})
            self.tracing.end(span)


class TracedAsyncSubscription(AsyncSubscription):
    """An :class:`~stompfast.AsyncSubscription` of an instrumented client: its messages get CONSUMER spans.

    Made by re-classing what the client's ``subscribe`` returned (the object is the
    same, nothing is copied); ``otel`` holds its spans.
    """

    otel: SubscriptionTrace

    async def __anext__(self) -> Message:
        message = await super().__anext__()
        self.otel.took(message)
        return message

    async def receive(self) -> Message:
        message = await super().receive()
        self.otel.took(message)
        return message

    async def receive_batch(self, max_messages: int = 100) -> List[Message]:
        batch = await super().receive_batch(max_messages)
        took = self.otel.took
        for message in batch:
            took(message)
        return batch

    async def ack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
                          headers: Optional[Mapping[str, Any]] = None) -> None:
        await self.settle("ack", message, transaction, receipt, headers)

    async def nack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
                           headers: Optional[Mapping[str, Any]] = None) -> None:
        await self.settle("nack", message, transaction, receipt, headers)

    async def settle(self, command: str, message: Message, transaction: Optional[str], receipt: bool,
                     headers: Optional[Mapping[str, Any]] = None) -> None:
        """ACK or NACK ``message`` (the subscription's own method), with its events."""
        otel = self.otel
        otel.settling(message, command, transaction)
        settle = super().ack_message if command == "ack" else super().nack_message
        try:
            await settle(message, transaction=transaction, receipt=receipt, headers=headers)
        except BaseException as exc:
            otel.settled(message, command, receipt, exc)
            raise
        otel.settled(message, command, receipt, None)

    def ack_nowait(self, message: Message) -> bool:
        done = super().ack_nowait(message)
        if done:
            self.otel.settling(message, "ack", None)
            self.otel.settled(message, "ack", False, None)
        return done

    async def aclose(self, *, forget: bool = False) -> None:
        try:
            await super().aclose(forget=forget)
        finally:
            self.otel.close()


class TracedSubscription(Subscription):
    """A :class:`~stompfast.Subscription` of an instrumented blocking client: its messages get CONSUMER spans."""

    otel: SubscriptionTrace

    def __next__(self) -> SyncMessage:
        message = super().__next__()
        self.otel.took(message)
        return message

    def receive(self, *, timeout: Optional[float] = None) -> SyncMessage:
        message = super().receive(timeout=timeout)
        self.otel.took(message)
        return message

    def receive_batch(self, max_messages: int = 100, *, timeout: Optional[float] = None) -> List[SyncMessage]:
        batch = super().receive_batch(max_messages, timeout=timeout)
        took = self.otel.took
        for message in batch:
            took(message)
        return batch

    def ack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
                    timeout: Optional[float] = None, headers: Optional[Mapping[str, Any]] = None) -> None:
        self.settle("ack", message, transaction, receipt, timeout, headers)

    def nack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
                     timeout: Optional[float] = None, headers: Optional[Mapping[str, Any]] = None) -> None:
        self.settle("nack", message, transaction, receipt, timeout, headers)

    def settle(self, command: str, message: Message, transaction: Optional[str], receipt: bool,
               timeout: Optional[float], headers: Optional[Mapping[str, Any]] = None) -> None:
        """ACK or NACK ``message`` (the subscription's own method), with its events."""
        otel = self.otel
        otel.settling(message, command, transaction)
        settle = super().ack_message if command == "ack" else super().nack_message
        try:
            settle(message, transaction=transaction, receipt=receipt, timeout=timeout, headers=headers)
        except BaseException as exc:
            otel.settled(message, command, receipt, exc)
            raise
        otel.settled(message, command, receipt, None)

    def close(self, *, forget: bool = False) -> None:
        try:
            super().close(forget=forget)
        finally:
            self.otel.close()


def adopt(sub: Union[AsyncSubscription, Subscription], otel: SubscriptionTrace) -> None:
    """Make ``sub`` a traced subscription (the same object, re-classed; idempotent, any thread)."""
    if isinstance(sub, (TracedAsyncSubscription, TracedSubscription)):
        return
    setattr(sub, "otel", otel)  # noqa: B010  (before the class changes: a traced method finds it set)
    sub.__class__ = TracedAsyncSubscription if isinstance(sub, AsyncSubscription) else TracedSubscription


# -- the methods installed on one client ------------------------------------------------------


def _alive(ref: "weakref.ref[Any]") -> Any:
    client = ref()
    if client is None:
        raise ClientClosedError("the client this method belonged to is gone")
    return client


def _settle_via_client(tracing: Tracing, command: str, message: Message, receipt: bool,
                       call: Callable[[], None]) -> None:
    """``client.ack(message)`` / ``client.nack(message)`` of the blocking client, with the events."""
    sub = tracing.trace_of(message)
    if sub is not None:
        sub.settling(message, command, None)
    try:
        call()
    except BaseException as exc:
        if sub is not None:
            sub.settled(message, command, receipt, exc)
        raise
    if sub is not None:
        sub.settled(message, command, receipt, None)


def async_client_methods(client: AsyncClient, tracing: Tracing) -> Dict[str, Callable[..., Any]]:
    """The traced ``send``, ``send_nowait``, ``subscribe`` and ``transaction`` of ``client``.

    They call the class's own methods (the closures keep no reference to the client,
    only a weak one: an instrumented client is freed like any other).
    """
    cls = type(client)
    ref = weakref.ref(client)

    async def send(destination: str, body: Union[bytes, bytearray, memoryview, str] = b"", *,
                   headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None,
                   receipt: bool = False, wait: bool = True, content_length: bool = True) -> Optional[Receipt]:
        this = _alive(ref)
        span, traced = tracing.start_send(destination, body, headers)
        if span is None:
            return await cls.send(this, destination, body, headers=headers, content_type=content_type,
                                  receipt=receipt, wait=wait, content_length=content_length)
        try:
            result = await cls.send(this, destination, body, headers=traced, content_type=content_type,
                                    receipt=receipt, wait=wait, content_length=content_length)
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        follow(span, result)
        return result

    def follow(span: Span, result: Optional[Receipt]) -> None:
        if result is None:
            tracing.end(span)
        elif result.done():
            tracing.end_with_receipt(span, result.receipt_id, result.error)
        else:
            result.add_done_callback(lambda r: tracing.end_with_receipt(span, r.receipt_id, r.error))

    def send_nowait(destination: str, body: Union[bytes, bytearray, memoryview, str] = b"", *,
                    headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None,
                    receipt: bool = False) -> Optional[Receipt]:
        this = _alive(ref)
        span, traced = tracing.start_send(destination, body, headers)
        if span is None:
            return cls.send_nowait(this, destination, body, headers=headers, content_type=content_type,
                                   receipt=receipt)
        try:
            result = cls.send_nowait(this, destination, body, headers=traced, content_type=content_type,
                                     receipt=receipt)
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        follow(span, result)
        return result

    def subscribe(destination: str, **kwargs: Any) -> AsyncSubscription:
        sub = cls.subscribe(_alive(ref), destination, **kwargs)
        adopt(sub, SubscriptionTrace(tracing, destination, sub.ack_mode, "receive"))
        return sub

    def transaction(*, receipt: bool = True) -> Any:
        tx = cls.transaction(_alive(ref), receipt=receipt)
        tx_send = type(tx).send

        async def traced_send(destination: str, body: Union[bytes, str] = b"", **kwargs: Any) -> None:
            span, headers = tracing.start_send(destination, body, kwargs.get("headers"), tx.id)
            if span is not None:
                kwargs["headers"] = headers
            try:
                await tx_send(tx, destination, body, **kwargs)
            except BaseException as exc:
                tracing.end(span, exc)
                raise
            tracing.end(span)

        setattr(tx, "send", traced_send)  # noqa: B010
        return tx

    # (``client.ack(message)`` is ``message.ack()``: the traced subscription's ack_message sees it)
    return {"send": send, "send_nowait": send_nowait, "subscribe": subscribe, "transaction": transaction}


def sync_client_methods(client: Client, tracing: Tracing) -> Dict[str, Callable[..., Any]]:
    """The traced ``send``, ``subscribe``, ``ack``, ``nack``, ``transaction`` of a blocking ``client``."""
    cls = type(client)
    ref = weakref.ref(client)

    def send(destination: str, body: Union[bytes, bytearray, memoryview, str] = b"", *,
             headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None,
             receipt: bool = False, wait: bool = True, timeout: Optional[float] = None,
             content_length: bool = True) -> Optional[ReceiptFuture]:
        this = _alive(ref)
        span, traced = tracing.start_send(destination, body, headers)
        if span is None:
            return cls.send(this, destination, body, headers=headers, content_type=content_type, receipt=receipt,
                            wait=wait, timeout=timeout, content_length=content_length)
        try:
            result = cls.send(this, destination, body, headers=traced, content_type=content_type, receipt=receipt,
                              wait=wait, timeout=timeout, content_length=content_length)
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        if result is None:
            tracing.end(span)
        else:
            receipt_id = result.receipt_id

            def done(future: "concurrent.futures.Future[Any]") -> None:
                tracing.end_with_receipt(span, receipt_id, future.exception())

            result.add_done_callback(done)
        return result

    def subscribe(destination: str, *, callback: Optional[Callable[[SyncMessage], Any]] = None,
                  **kwargs: Any) -> Subscription:
        otel = SubscriptionTrace(tracing, destination, kwargs.get("ack", "auto"),
                                 "receive" if callback is None else "process")
        if callback is not None:
            callback = _traced_callback(callback, otel)
        sub = cls.subscribe(_alive(ref), destination, callback=callback, **kwargs)
        adopt(sub, otel)
        return sub

    def ack(message: Message, *, receipt: bool = False, timeout: Optional[float] = None,
            headers: Optional[Mapping[str, Any]] = None) -> None:
        this = _alive(ref)
        _settle_via_client(tracing, "ack", message, receipt,
                           lambda: cls.ack(this, message, receipt=receipt, timeout=timeout, headers=headers))

    def nack(message: Message, *, receipt: bool = False, timeout: Optional[float] = None,
             headers: Optional[Mapping[str, Any]] = None) -> None:
        this = _alive(ref)
        _settle_via_client(tracing, "nack", message, receipt,
                           lambda: cls.nack(this, message, receipt=receipt, timeout=timeout, headers=headers))

    def transaction(*, receipt: bool = True, timeout: Optional[float] = None) -> Any:
        tx = cls.transaction(_alive(ref), receipt=receipt, timeout=timeout)
        tx_cls = type(tx)

        def traced_send(destination: str, body: Union[bytes, str] = b"", *, timeout: Optional[float] = None,
                        **kwargs: Any) -> None:
            span, headers = tracing.start_send(destination, body, kwargs.get("headers"), tx.id)
            if span is not None:
                kwargs["headers"] = headers
            try:
                tx_cls.send(tx, destination, body, timeout=timeout, **kwargs)
            except BaseException as exc:
                tracing.end(span, exc)
                raise
            tracing.end(span)

        def traced_settle(command: str) -> Callable[..., None]:
            settle = tx_cls.ack if command == "ack" else tx_cls.nack

            def run(message: Message, *, timeout: Optional[float] = None) -> None:
                sub = tracing.trace_of(message)
                if sub is not None:
                    sub.settling(message, command, tx.id)
                try:
                    settle(tx, message, timeout=timeout)
                except BaseException as exc:
                    if sub is not None:
                        sub.settled(message, command, False, exc)
                    raise
                if sub is not None:
                    sub.settled(message, command, False, None)
            return run

        setattr(tx, "send", traced_send)  # noqa: B010
        setattr(tx, "ack", traced_settle("ack"))  # noqa: B010
        setattr(tx, "nack", traced_settle("nack"))  # noqa: B010
        return tx

    return {"send": send, "subscribe": subscribe, "ack": ack, "nack": nack, "transaction": transaction}


def _traced_callback(callback: Callable[[SyncMessage], Any], otel: SubscriptionTrace) -> Callable[[SyncMessage], Any]:
    """``callback`` run inside the message's ``process`` span (current in the callback's thread)."""

    def traced(message: SyncMessage) -> Any:
        # The blocking subscription the message came through: it may not be traced yet, when
        # the callback thread gets a message before subscribe() returned.
        adopt(message.owner.blocking, otel)
        token = otel.begin_process(message)
        try:
            result = callback(message)
        except BaseException as exc:
            otel.end_process(message, token, exc)
            raise
        otel.end_process(message, token, None)
        return result

    return traced
