"""stomp.py's listeners (``stomp.listener``): the callbacks a connection calls, and the stock listeners.

Theory of operation
-------------------
A connection keeps its listeners by name. Every received frame is handed to the
listeners in the order of their names, on the connection's one receiver thread:
``on_before_message`` then ``on_message`` for a MESSAGE (each listener in turn gets the
same mutable :class:`~stompfast.compat.stomp.utils.Frame`, so edits in
``on_before_message`` show in ``on_message``), ``on_connected``, ``on_receipt``,
``on_error``, ``on_heartbeat``. ``on_send`` runs in the sending thread before a frame is
encoded, and may edit it. ``on_connecting`` runs in the thread that called
``connect()``; ``on_disconnected`` and ``on_receiver_loop_completed`` on the receiver
thread as it ends; ``on_heartbeat_timeout`` on the heart-beat thread, in the order the
listeners were added (stomp.py does not sort there).

The connection itself is registered as ``"protocol-listener"``: on 1.1 and 1.2 it is a
:class:`HeartbeatListener`, which negotiates and runs the heart-beats.
"""

import sys
import threading
import time
from time import monotonic
from typing import Any, Dict, List, Optional, Tuple

from . import exception, logging as log, utils
from .constants import CMD_CONNECT, CMD_STOMP, HDR_HEARTBEAT


class Publisher:
    """A registry of named listeners (the connection classes implement it)."""

    def set_listener(self, name: str, listener: "ConnectionListener") -> None:
        """Add (or replace) the listener called ``name``."""

    def remove_listener(self, name: str) -> None:
        """Remove the listener called ``name``."""

    def get_listener(self, name: str) -> "Optional[ConnectionListener]":
        """The listener called ``name``, or ``None``."""
        return None


class ConnectionListener:
    """The base class of listeners: every callback a connection makes, each doing nothing."""

    def on_connecting(self, host_and_port: Tuple[str, int]) -> None:
        """The TCP (or TLS) connection to ``host_and_port`` is up; CONNECT is not sent yet."""

    def on_connected(self, frame: utils.Frame) -> None:
        """CONNECTED arrived."""

    def on_disconnecting(self) -> None:
        """Kept for stomp.py's API: stomp.py 8 never calls it, and neither does this module."""

    def on_disconnected(self) -> None:
        """The connection is gone (closed by us after DISCONNECT's receipt, by the broker, or lost)."""

    def on_heartbeat_timeout(self) -> None:
        """Nothing arrived from the broker within the agreed interval times ``heart_beat_receive_scale``."""

    def on_before_message(self, frame: utils.Frame) -> None:
        """A MESSAGE arrived; called before ``on_message`` with the same frame, which may be edited here."""

    def on_message(self, frame: utils.Frame) -> None:
        """A MESSAGE arrived."""

    def on_receipt(self, frame: utils.Frame) -> None:
        """A RECEIPT arrived (``frame.headers["receipt-id"]`` is the id the frame asked for)."""

    def on_error(self, frame: utils.Frame) -> None:
        """An ERROR arrived. The connection is not closed for it (the broker usually closes it)."""

    def on_send(self, frame: utils.Frame) -> None:
        """A frame is about to be sent (``cmd`` is ``None`` for a heart-beat); edits to it are sent."""

    def on_heartbeat(self) -> None:
        """A heart-beat arrived."""

    def on_receiver_loop_completed(self, frame: Optional[utils.Frame]) -> None:
        """The receiver thread is ending; ``frame`` is always ``None``."""


def agreed_heartbeats(offered: Tuple[int, int], header: str) -> Tuple[int, int]:
    """The heart-beats ``(send, receive)`` in ms agreed from ours and CONNECTED's ``heart-beat`` header.

    Spaces are removed first, as stomp.py does; the rest is the client's negotiation
    (:func:`utils.calculate_heartbeats`): the broker's values clamped to one hour, a
    header that is not two integers refused with :class:`stompfast.RemoteProtocolError`.
    """
    return utils.calculate_heartbeats(header.replace(" ", "").split(","), offered)


class HeartbeatListener(ConnectionListener):
    """Heart-beats for a 1.1/1.2 connection: adds ``heart-beat`` to CONNECT and runs a heart-beat thread.

    After CONNECTED it sends a heart-beat when nothing was sent for the agreed send
    interval, and calls ``on_heartbeat_timeout`` (and closes the socket) when nothing
    arrived for the agreed receive interval times ``heart_beat_receive_scale``.
    """

    def __init__(self, transport: Any, heartbeats: Tuple[int, int], heart_beat_receive_scale: float = 1.5) -> None:
        self.running = False
        self.transport = transport
        self.heartbeats = heartbeats
        self.received_heartbeat: Optional[float] = None
        self.heartbeat_thread: Optional[threading.Thread] = None
        self.next_outbound_heartbeat: Optional[float] = None
        self.heart_beat_receive_scale = heart_beat_receive_scale
        self.heartbeat_terminate_event = threading.Event()
        self.disconnecting = False
        self.send_sleep = 0.0
        self.receive_sleep = 0.0

    def on_connected(self, frame: utils.Frame) -> None:
        """Agree the intervals from CONNECTED's ``heart-beat`` and start the heart-beat thread if any is non-zero."""
        self.disconnecting = False
        if "heart-beat" not in frame.headers:
            return
        # This cannot raise: the receiver refuses a CONNECTED whose header is not two
        # integers before any listener sees it.
        self.heartbeats = agreed_heartbeats(self.heartbeats, frame.headers["heart-beat"])
        if self.heartbeats == (0, 0):
            return
        self.send_sleep = self.heartbeats[0] / 1000
        self.receive_sleep = (self.heartbeats[1] / 1000) * self.heart_beat_receive_scale
        # the first heart-beat gets one interval of grace
        self.received_heartbeat = monotonic() + self.receive_sleep
        self.running = True
        if self.heartbeat_thread is not None and not self.heartbeat_terminate_event.is_set():
            # this session's thread runs already (a second CONNECTED)
            return
        # A new thread with an event of its own: a thread told to stop by the last
        # session's on_disconnected may still be ending, and must neither keep this
        # session's beats from starting nor clear this session's event as it ends
        self.heartbeat_terminate_event = stop = threading.Event()
        self.heartbeat_thread = utils.default_create_thread(lambda: self._heartbeat_loop(stop))
        self.heartbeat_thread.name = "StompHeartbeat%s" % getattr(self.heartbeat_thread, "name", "Thread")

    def on_disconnected(self) -> None:
        """Stop the heart-beat thread, and wait (up to a second) for it to end unless this is that thread."""
        self.running = False
        self.heartbeat_terminate_event.set()
        thread = self.heartbeat_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)

    def on_disconnecting(self) -> None:
        """Stop sending heart-beats."""
        self.disconnecting = True

    def on_message(self, frame: utils.Frame) -> None:
        """Any frame from the broker counts as a sign of life."""
        self._update_heartbeat()

    def on_receipt(self, frame: utils.Frame) -> None:
        """Any frame from the broker counts as a sign of life."""
        self._update_heartbeat()

    def on_error(self, frame: utils.Frame) -> None:
        """Any frame from the broker counts as a sign of life."""
        self._update_heartbeat()

    def on_heartbeat(self) -> None:
        """A heart-beat is a sign of life."""
        self._update_heartbeat()

    def on_send(self, frame: utils.Frame) -> None:
        """Add ``heart-beat`` to CONNECT/STOMP, and push the next heart-beat back: a frame was just sent."""
        if frame.cmd in (CMD_CONNECT, CMD_STOMP) and self.heartbeats != (0, 0):
            frame.headers[HDR_HEARTBEAT] = "%s,%s" % self.heartbeats
        if self.next_outbound_heartbeat is not None:
            self.next_outbound_heartbeat = monotonic() + self.send_sleep

    def _update_heartbeat(self) -> None:
        # the grace given at CONNECTED is kept until it has passed
        if self.received_heartbeat is None:
            return
        now = monotonic()
        if now > self.received_heartbeat:
            self.received_heartbeat = now

    def _heartbeat_loop(self, stop: threading.Event) -> None:
        now = monotonic()
        if self.send_sleep != 0:
            self.next_outbound_heartbeat = now + self.send_sleep
        while not stop.is_set():
            now = monotonic()
            next_events = []
            if self.next_outbound_heartbeat is not None:
                next_events.append(self.next_outbound_heartbeat - now)
            if self.receive_sleep != 0 and self.received_heartbeat is not None:
                left = self.received_heartbeat + self.receive_sleep - now
                if left > 0:
                    next_events.append(left)
            sleep_time = min(next_events) if next_events else 0
            if sleep_time > 0 and stop.wait(sleep_time):
                break
            now = monotonic()
            if not self.transport.is_connected() or self.disconnecting:
                # stomp.py sleeps one send interval here; the event ends that sleep early
                stop.wait(self.send_sleep)
                continue
            if self.send_sleep != 0 and self.next_outbound_heartbeat is not None and now > self.next_outbound_heartbeat:
                try:
                    self.transport.transmit(utils.Frame(None, {}, None))
                except exception.NotConnectedException:
                    log.debug("lost connection, unable to send heartbeat")
                except Exception:
                    log.debug("unable to send heartbeat, due to: %s", sys.exc_info()[1])
            if self.receive_sleep != 0 and self.received_heartbeat is not None:
                silent = now - self.received_heartbeat
                if silent > self.receive_sleep:
                    log.warning("heartbeat timeout: diff_receive=%s, time=%s, lastrec=%s",
                                silent, now, self.received_heartbeat)
                    self.transport.set_connected(False)
                    self.transport.disconnect_socket()
                    self.transport.stop()
                    # stomp.py calls these in the order the listeners were added, on this thread
                    for listener in list(self.transport.listeners.values()):
                        listener.on_heartbeat_timeout()
        if self.heartbeat_thread is threading.current_thread():
            self.heartbeat_thread = None


class WaitingListener(ConnectionListener):
    """Waits for one receipt id (``wait_on_receipt``) and for the connection to end (``wait_on_disconnected``).

    Both waits are unbounded by default, as in stomp.py; the optional ``timeout`` (seconds)
    is a stompfast addition: the wait then returns ``False`` when the time is up.
    """

    def __init__(self, receipt: Optional[str]) -> None:
        self.receipt_condition = threading.Condition()
        self.disconnect_condition = threading.Condition()
        self.receipt = receipt
        self.received = False
        self.disconnected = False

    def on_receipt(self, frame: utils.Frame) -> None:
        """Wake the waiter when the receipt is the one awaited."""
        if frame.headers.get("receipt-id") == self.receipt:
            with self.receipt_condition:
                self.received = True
                self.receipt_condition.notify()

    def on_disconnected(self) -> None:
        """Wake the disconnect waiter."""
        with self.disconnect_condition:
            self.disconnected = True
            self.disconnect_condition.notify()

    def wait_on_receipt(self, timeout: Optional[float] = None) -> bool:
        """Block until the receipt arrived (then reset, to wait for it again); ``False`` if ``timeout`` passed."""
        deadline = None if timeout is None else monotonic() + timeout
        with self.receipt_condition:
            while not self.received:
                left = None if deadline is None else deadline - monotonic()
                if left is not None and left <= 0:
                    return False
                self.receipt_condition.wait(left)
            self.received = False
        return True

    def wait_on_disconnected(self, timeout: Optional[float] = None) -> bool:
        """Block until the connection ended; ``False`` if ``timeout`` passed first."""
        deadline = None if timeout is None else monotonic() + timeout
        with self.disconnect_condition:
            while not self.disconnected:
                left = None if deadline is None else deadline - monotonic()
                if left is not None and left <= 0:
                    return False
                self.disconnect_condition.wait(left)
        return True


class StatsListener(ConnectionListener):
    """Counts what happened: connections, disconnects, messages in and frames out, errors, heart-beats."""

    def __init__(self) -> None:
        self.errors = 0
        self.connections = 0
        self.disconnects = 0
        self.messages = 0
        #: every frame sent, heart-beats and CONNECT included (stomp.py counts them all)
        self.messages_sent = 0
        self.heartbeat_timeouts = 0
        self.heartbeat_count = 0

    def on_disconnected(self) -> None:
        """Count a disconnect."""
        self.disconnects += 1
        log.info("disconnected (x %s)", self.disconnects)

    def on_error(self, frame: utils.Frame) -> None:
        """Count an ERROR."""
        if log.isEnabledFor(log.DEBUG):
            log.debug("received an error %s [%s]", frame.body, frame.headers)
        else:
            log.info("received an error %s", frame.body)
        self.errors += 1

    def on_connecting(self, host_and_port: Tuple[str, int]) -> None:
        """Count a connection (a TCP connection, before CONNECT)."""
        log.info("connecting %s %s (x %s)", host_and_port[0], host_and_port[1], self.connections)
        self.connections += 1

    def on_message(self, frame: utils.Frame) -> None:
        """Count a MESSAGE."""
        self.messages += 1

    def on_send(self, frame: utils.Frame) -> None:
        """Count a frame sent."""
        self.messages_sent += 1

    def on_heartbeat_timeout(self) -> None:
        """Count a heart-beat timeout."""
        self.heartbeat_timeouts += 1

    def on_heartbeat(self) -> None:
        """Count a heart-beat received."""
        self.heartbeat_count += 1

    def __str__(self) -> str:
        return (
            "Connections: %s\nDisconnects: %s\nMessages sent: %s\nMessages received: %s\n"
            "Heartbeats received: %s\nErrors: %s"
            % (self.connections, self.disconnects, self.messages_sent, self.messages, self.heartbeat_count,
               self.errors)
        )


class PrintingListener(ConnectionListener):
    """Prints every callback (to stdout, or to the ``stomp.py`` logger at INFO with ``print_to_log=True``)."""

    def __init__(self, print_to_log: bool = False) -> None:
        self.print_to_log = print_to_log

    def _print(self, msg: str, *args: Any) -> None:
        if self.print_to_log:
            log.info(msg, *args)
        else:
            print(msg % args)

    def on_connecting(self, host_and_port: Tuple[str, int]) -> None:
        """Print it."""
        self._print("on_connecting %s %s", *host_and_port)

    def on_connected(self, frame: utils.Frame) -> None:
        """Print it."""
        self._print("on_connected %s %s", frame.headers, frame.body)

    def on_disconnected(self) -> None:
        """Print it."""
        self._print("on_disconnected")

    def on_heartbeat_timeout(self) -> None:
        """Print it."""
        self._print("on_heartbeat_timeout")

    def on_before_message(self, frame: utils.Frame) -> None:
        """Print it."""
        self._print("on_before_message %s %s", frame.headers, frame.body)

    def on_message(self, frame: utils.Frame) -> None:
        """Print it."""
        self._print("on_message %s %s", frame.headers, frame.body)

    def on_receipt(self, frame: utils.Frame) -> None:
        """Print it."""
        self._print("on_receipt %s %s", frame.headers, frame.body)

    def on_error(self, frame: utils.Frame) -> None:
        """Print it."""
        self._print("on_error %s %s", frame.headers, frame.body)

    def on_send(self, frame: utils.Frame) -> None:
        """Print it (the passcode masked)."""
        self._print("on_send %s %s %s", frame.cmd, utils.clean_headers(frame.headers), frame.body)

    def on_heartbeat(self) -> None:
        """Print it."""
        self._print("on_heartbeat")


class TestListener(StatsListener, WaitingListener, PrintingListener):
    """Stats, waiting and printing in one, plus ``message_list`` and waits for a message or a heart-beat."""

    # not a pytest test class, despite its name
    __test__ = False

    def __init__(self, receipt: Optional[str] = None, print_to_log: bool = False) -> None:
        StatsListener.__init__(self)
        PrintingListener.__init__(self, print_to_log)
        WaitingListener.__init__(self, receipt)
        self.message_list: List[Tuple[Dict[str, Any], Any]] = []
        self.message_condition = threading.Condition()
        self.message_received = False
        self.heartbeat_condition = threading.Condition()
        self.heartbeat_received = False
        self.timestamp = time.strftime("%Y%m%d%H%M%S")

    def wait_for_message(self, timeout: Optional[float] = None) -> bool:
        """Block until a message arrived since the last wait; ``False`` if ``timeout`` (a stompfast addition) passed."""
        deadline = None if timeout is None else monotonic() + timeout
        with self.message_condition:
            while not self.message_received:
                left = None if deadline is None else deadline - monotonic()
                if left is not None and left <= 0:
                    return False
                self.message_condition.wait(left)
            self.message_received = False
        return True

    def get_latest_message(self) -> Tuple[Dict[str, Any], Any]:
        """``(headers, body)`` of the last message."""
        return self.message_list[-1]

    def wait_for_heartbeat(self, timeout: Optional[float] = None) -> bool:
        """Block until a heart-beat arrived since the last wait; ``False`` if ``timeout`` passed."""
        deadline = None if timeout is None else monotonic() + timeout
        with self.heartbeat_condition:
            while not self.heartbeat_received:
                left = None if deadline is None else deadline - monotonic()
                if left is not None and left <= 0:
                    return False
                self.heartbeat_condition.wait(left)
            self.heartbeat_received = False
        return True

    def on_connecting(self, host_and_port: Tuple[str, int]) -> None:
        """Count and print it."""
        StatsListener.on_connecting(self, host_and_port)
        PrintingListener.on_connecting(self, host_and_port)

    def on_connected(self, frame: utils.Frame) -> None:
        """Print it."""
        PrintingListener.on_connected(self, frame)

    def on_disconnected(self) -> None:
        """Count, print, and wake the disconnect waiter."""
        StatsListener.on_disconnected(self)
        PrintingListener.on_disconnected(self)
        WaitingListener.on_disconnected(self)

    def on_heartbeat_timeout(self) -> None:
        """Count and print it."""
        StatsListener.on_heartbeat_timeout(self)
        PrintingListener.on_heartbeat_timeout(self)

    def on_before_message(self, frame: utils.Frame) -> None:
        """Print it."""
        PrintingListener.on_before_message(self, frame)

    def on_message(self, frame: utils.Frame) -> None:
        """Count, print, keep ``(headers, body)`` and wake ``wait_for_message``."""
        StatsListener.on_message(self, frame)
        PrintingListener.on_message(self, frame)
        self.message_list.append((frame.headers, frame.body))
        with self.message_condition:
            self.message_received = True
            self.message_condition.notify()

    def on_receipt(self, frame: utils.Frame) -> None:
        """Print it and wake the receipt waiter."""
        PrintingListener.on_receipt(self, frame)
        WaitingListener.on_receipt(self, frame)

    def on_error(self, frame: utils.Frame) -> None:
        """Count and print it."""
        StatsListener.on_error(self, frame)
        PrintingListener.on_error(self, frame)

    def on_send(self, frame: utils.Frame) -> None:
        """Count and print it."""
        StatsListener.on_send(self, frame)
        PrintingListener.on_send(self, frame)

    def on_heartbeat(self) -> None:
        """Count, print, and wake ``wait_for_heartbeat``."""
        StatsListener.on_heartbeat(self)
        PrintingListener.on_heartbeat(self)
        with self.heartbeat_condition:
            self.heartbeat_received = True
            self.heartbeat_condition.notify()
