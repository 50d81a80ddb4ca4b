"""The soak and chaos run: confirmed messages through a resetting proxy (and broker restarts) are never lost.

Producers send with pipelined receipts (``send(..., receipt=True, wait=False)``,
at most ``window`` unconfirmed per producer) and send again every message whose
receipt failed (the link went down first: the broker may or may not have it).
Consumers read in ``client-individual`` mode and ack each message. Every client
goes through one :class:`stompfast.testing.FaultProxy`, which resets all of its
links every ``reset_every`` seconds (jittered); optionally the broker (RabbitMQ)
is restarted ``restarts`` times with ``scripts/brokers.sh restart rabbitmq``.

At the end (every message confirmed, and at least ``seconds`` elapsed):

* lost: messages confirmed by a receipt and never received (must be 0);
* duplicates: receptions beyond the first of a message, each explained by the
  copies' headers: ``redelivered:true`` on this copy or an earlier one (the
  broker delivered it before, and the ack was lost with the link: at-least-once
  redelivery; with several consumers, or the blocking client's threads, a
  redelivered copy can be recorded before the original, which a consumer had
  taken just before its link died) or another ``x-try`` than the first copy's
  (the producer sent it again because the receipt of a stored copy was lost
  with the link); anything else is counted as unexplained (must be 0);
* RSS: sampled every half second; the growth from the end of the warm-up (the
  first quarter of the run) to the peak must stay under ``max_rss_growth_mb``.

It prints one summary line (see :meth:`SoakResult.summary`). ``python -m
tests.soak --help`` runs it by hand; ``tests/soak/test_soak.py`` runs the
short profile under pytest.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import threading
import time
import uuid
from array import array
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import anyio

from stompfast import (
    AsyncClient,
    Client,
    ConnectionLostError,
    Receipt,
    ReceiveTimeout,
    ReconnectPolicy,
    StompError,
)
from stompfast._config import parse_url
from stompfast.testing import FaultProxy, Trigger

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BROKERS = {
    "rabbitmq": os.environ.get("STOMPFAST_RABBITMQ_URL", "stomp://guest:guest@127.0.0.1:61613/"),
    "activemq": os.environ.get("STOMPFAST_ACTIVEMQ_URL", "stomp://guest:guest@127.0.0.1:61614/"),
}
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def brokers_script() -> str:
    return os.environ.get("STOMPFAST_BROKERS_SCRIPT", os.path.join(REPO, "scripts", "brokers.sh"))


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def restart_rabbitmq() -> float:
    """``scripts/brokers.sh restart rabbitmq`` (waits for STOMP); returns the seconds it took.

    The node is the one ``STOMPFAST_RABBITMQ_NODE`` names (``brokers.sh env rabbitmq4``: the 4.x one).
    """
    node = os.environ.get("STOMPFAST_RABBITMQ_NODE") or "rabbitmq"
    t0 = time.monotonic()
    done = subprocess.run(["bash", brokers_script(), "restart", node], capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"brokers.sh restart {node} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.monotonic() - t0


@dataclass
class SoakConfig:
    """One soak run. ``messages`` are all confirmed, and the run lasts at least ``seconds``."""

    url: str
    broker: str = "broker"
    messages: int = 20_000
    seconds: float = 30.0
    producers: int = 2
    consumers: int = 2
    window: int = 200
    buffer_size: int = 200
    body_size: int = 100
    reset_every: float = 2.0
    #: what each fault round does, picked at random: "reset" (every link gets an RST), "cut" (each open
    #: link is reset part-way through its next frame down), "half_close" (a FIN one way), "stall" (both
    #: ways held for 0.5-4 s: heart-beats time out, connects stall), "outage" (every link, and every new
    #: one, reset for 1-5 s: the clients' reconnect backoff at work)
    faults: Tuple[str, ...] = ("reset",)
    restarts: int = 0
    restart: Callable[[], float] = restart_rabbitmq
    drain_timeout: float = 120.0
    max_rss_growth_mb: float = 50.0
    heart_beat: int = 5000
    persistent: bool = True
    #: "async": AsyncClient tasks in the run's loop; "sync": the blocking Client, each in a worker thread
    client: str = "async"
    sync_backend: str = "asyncio"
    progress: Optional[Callable[[str], None]] = None
    seed: Optional[int] = None


@dataclass
class SoakResult:
    config: SoakConfig
    confirmed: int = 0
    received: int = 0
    unique: int = 0
    lost: int = 0
    duplicates: Counter = field(default_factory=Counter)  # why: "redelivered", "re-sent", "unexplained"
    resends: int = 0
    send_errors: Counter = field(default_factory=Counter)
    ack_errors: Counter = field(default_factory=Counter)
    subscribe_retries: Counter = field(default_factory=Counter)
    link_resets: int = 0
    link_faults: Counter = field(default_factory=Counter)  # the proxy's faults by kind (each link counts)
    fault_rounds: int = 0
    restarts: List[float] = field(default_factory=list)
    reconnects: int = 0
    rss_start: int = 0
    rss_warm: int = 0
    rss_peak: int = 0
    rss_end: int = 0
    duration: float = 0.0
    errors: List[str] = field(default_factory=list)
    unexplained: List[str] = field(default_factory=list)  # the first unexplained duplicates, for diagnosis

    @property
    def faults_injected(self) -> int:
        return sum(self.link_faults.values()) + len(self.restarts)

    @property
    def rss_growth(self) -> int:
        return max(0, self.rss_peak - self.rss_warm)

    def summary(self) -> str:
        mb = 1024 * 1024
        d = self.duplicates
        return (
            f"soak {self.config.broker}: messages {self.confirmed} confirmed, {self.received} received; "
            f"faults injected {self.faults_injected} ({self._faults()}{len(self.restarts)} broker restarts); "
            f"lost {self.lost}; "
            f"duplicates {sum(d.values())} (redelivered after a lost ack {d['redelivered']}, "
            f"re-sent after a lost receipt {d['re-sent']}, unexplained {d['unexplained']}); "
            f"re-sends {self.resends}; reconnects {self.reconnects}; "
            f"peak RSS {self.rss_peak / mb:.1f} MB (after warm-up {self.rss_warm / mb:.1f} MB, "
            f"growth {self.rss_growth / mb:.1f} MB); duration {self.duration:.1f} s "
            f"({self.confirmed / max(self.duration, 1e-9):,.0f} msg/s)"
        )

    def _faults(self) -> str:
        names = {"reset": "link resets", "half_close": "half-closes", "stall": "stalled directions"}
        return "".join(f"{n} {names.get(k, k)}, " for k, n in sorted(self.link_faults.items()))

    def problems(self) -> List[str]:
        """What makes the run a failure (empty: it passed)."""
        out = list(self.errors)
        if self.lost:
            out.append(f"{self.lost} confirmed messages were never received")
        if self.duplicates["unexplained"]:
            out.append(f"{self.duplicates['unexplained']} duplicates carry neither redelivered:true "
                       "nor another x-try")
        if self.rss_growth > self.config.max_rss_growth_mb * 1024 * 1024:
            out.append(f"RSS grew {self.rss_growth / 1048576:.1f} MB after the warm-up "
                       f"(limit {self.config.max_rss_growth_mb} MB)")
        if self.confirmed != self.config.messages:
            out.append(f"only {self.confirmed} of {self.config.messages} messages were confirmed")
        return out


class _Run:
    def __init__(self, config: SoakConfig, proxy: FaultProxy) -> None:
        self.c = config
        self.proxy = proxy
        self.url = proxy.rewrite(config.url)
        self.queue = f"/queue/stompfast-soak-{uuid.uuid4().hex[:12]}"
        self.rng = random.Random(config.seed)
        n = config.messages
        self.r = SoakResult(config)
        # per message: how often sent and confirmed; received copies and the try of the first one
        self.tries = array("B", bytes(n))
        self.confirmed = bytearray(n)
        self.copies = array("B", bytes(n))
        self.first_try = array("B", bytes(n))
        self.redelivered = bytearray(n)  # some copy received so far carried redelivered:true
        self.todo: Deque[int] = deque()  # messages whose receipt failed: send again
        self.next_seq = 0
        self.producing = True
        self.consuming = True
        self.t0 = 0.0
        self.body = b"x" * config.body_size
        self.clients: List[Any] = []
        self.recent: "OrderedDict[int, str]" = OrderedDict()  # seq -> its last copy's identity (diagnostics)
        self.last_received = 0.0
        self.rate = config.messages / config.seconds if config.seconds > 0 else float("inf")
        # the blocking clients' threads and loops update the counts too
        self.lock = threading.Lock()

    def policy(self) -> ReconnectPolicy:
        # quick retries (a reset link is back at once), capped for the seconds a broker restart takes;
        # sessions cut every few seconds on purpose must not push the delay to its cap
        # the first connect too may meet a fault round: it retries as well (the run has its own deadline)
        return ReconnectPolicy(initial_delay=0.05, max_delay=1.0, jitter=0.2, stable_after=0.5,
                               connect_attempts=None)

    def client(self) -> AsyncClient:
        hb = self.c.heart_beat
        client = AsyncClient(self.url, heart_beat=(hb, hb), reconnect=self.policy(), connect_timeout=10)
        self.clients.append(client)
        return client

    def sync_client(self) -> Client:
        hb = self.c.heart_beat
        client = Client(self.url, heart_beat=(hb, hb), reconnect=self.policy(), connect_timeout=10,
                        backend=self.c.sync_backend)
        self.clients.append(client)
        return client

    @contextlib.contextmanager
    def failure(self, who: str) -> Iterator[None]:
        """A producer or consumer that fails ends the run: say why in the result (then re-raise)."""
        try:
            yield
        except Exception as exc:
            with self.lock:
                self.r.errors.append(f"a {who} failed: {exc!r}")
            self.say(f"a {who} failed: {exc!r}")
            raise

    def say(self, text: str) -> None:
        if self.c.progress is not None:
            self.c.progress(f"[{time.monotonic() - self.t0:7.1f} s] {text}")

    # ------------------------------------------------------------------ producers

    def _take_seq(self) -> Optional[int]:
        """The next message to send (again), or None; paced so message k is due at k * seconds / messages."""
        with self.lock:
            if self.todo:
                return self.todo.popleft()
            if self.next_seq < self.c.messages and time.monotonic() >= self.t0 + self.next_seq / self.rate:
                seq = self.next_seq
                self.next_seq += 1
                return seq
            return None

    def _headers(self, seq: int) -> Dict[str, str]:
        with self.lock:
            t = self.tries[seq] + 1 if self.tries[seq] < 255 else 255
            self.tries[seq] = t
        headers = {"x-seq": str(seq), "x-try": str(t)}
        if self.c.persistent:
            headers["persistent"] = "true"
        return headers

    def _settled(self, seq: int, error: Optional[BaseException]) -> None:
        """A send's receipt came (error None) or failed: then the message is sent again."""
        with self.lock:
            if error is None:
                if not self.confirmed[seq]:
                    self.confirmed[seq] = 1
                    self.r.confirmed += 1
            else:
                self.r.send_errors[type(error).__name__] += 1
                self.r.resends += 1
                self.todo.append(seq)

    def _finished(self, pending: int) -> bool:
        return pending == 0 and self.r.confirmed == self.c.messages

    async def producer(self) -> None:
        c = self.c
        with self.failure("producer"):
            await self._produce(c)

    async def _produce(self, c: SoakConfig) -> None:
        async with self.client() as client:
            pending = 0
            space = anyio.Event()

            def done(receipt: Receipt, seq: int) -> None:
                nonlocal pending
                pending -= 1
                space.set()
                self._settled(seq, receipt.error)

            while self.producing:
                while pending >= c.window:
                    space = anyio.Event()
                    await space.wait()
                seq = self._take_seq()
                if seq is None:
                    if self._finished(pending):
                        return
                    space = anyio.Event()
                    with anyio.move_on_after(0.01):
                        await space.wait()
                    continue
                try:
                    receipt = await client.send(self.queue, self.body, headers=self._headers(seq),
                                                receipt=True, wait=False)
                except ConnectionLostError as exc:  # written on a link that died: not confirmed, send again
                    self._settled(seq, exc)
                    continue
                # any other error (the client failed for good) ends the run, with its reason, via failure():
                # re-sending into a dead client would spin without ever yielding to the loop
                assert receipt is not None  # receipt=True
                pending += 1
                receipt.add_done_callback(partial(done, seq=seq))

    def sync_producer(self) -> None:
        """The producer with the blocking client (in a worker thread); receipts settle in its loop thread."""
        c = self.c
        with self.failure("producer"), self.sync_client() as client:
            window = threading.Semaphore(c.window)
            pending = [0]

            def done(future: Any, seq: int) -> None:
                error = future.exception()
                with self.lock:
                    pending[0] -= 1
                window.release()
                self._settled(seq, error)

            while self.producing:
                if not window.acquire(timeout=0.1):
                    continue
                seq = self._take_seq()
                if seq is None:
                    window.release()
                    with self.lock:
                        if self._finished(pending[0]):
                            return
                    time.sleep(0.01)
                    continue
                try:
                    future = client.send(self.queue, self.body, headers=self._headers(seq), receipt=True,
                                         wait=False, timeout=60)
                except ConnectionLostError as exc:  # as the async producer: anything else ends the run
                    window.release()
                    self._settled(seq, exc)
                    continue
                assert future is not None
                with self.lock:
                    pending[0] += 1
                future.add_done_callback(partial(done, seq=seq))

    # ------------------------------------------------------------------ consumers

    def _record(self, message: Any) -> None:
        headers = message.headers
        seq = int(headers["x-seq"])
        t = int(headers["x-try"])
        with self.lock:
            self.last_received = time.monotonic()
            self.r.received += 1
            n = self.copies[seq]
            redelivered = message.redelivered
            if n == 0:
                self.first_try[seq] = t
                self.r.unique += 1
            elif redelivered or self.redelivered[seq]:
                # this copy, or one recorded before it, is a redelivery (concurrent consumers record their
                # copies in the order their threads get to it, not always in the broker's delivery order)
                self.r.duplicates["redelivered"] += 1
            elif t != self.first_try[seq]:
                self.r.duplicates["re-sent"] += 1
            else:
                self.r.duplicates["unexplained"] += 1
                if len(self.r.unexplained) < 20:
                    first = self.recent.get(seq)
                    self.r.unexplained.append(f"x-seq {seq} x-try {t}: first copy {first}, this copy "
                                              f"{self._identity(message)}")
            self.copies[seq] = n + 1 if n < 255 else 255
            if redelivered:
                self.redelivered[seq] = 1
            self.recent[seq] = self._identity(message)
            if len(self.recent) > 2_000:  # bounded (filled in the warm-up, so RSS stays flat)
                self.recent.popitem(last=False)

    @staticmethod
    def _identity(message: Any) -> str:
        h = message.headers
        return (f"message-id={h.get('message-id')} ack={h.get('ack')} redelivered={h.get('redelivered')} "
                f"object={id(message):#x}")

    def _ack_failed(self, exc: BaseException) -> None:
        # StaleMessageError: delivered before a reconnect, so it comes again
        with self.lock:
            self.r.ack_errors[type(exc).__name__] += 1

    async def consumer(self) -> None:
        with self.failure("consumer"):
            await self._consume(self.c)

    def _subscribe_failed(self, exc: BaseException) -> None:
        # a SUBSCRIBE whose receipt the link took with it is withdrawn and raises (docs/reconnect.md: pending
        # receipts fail with the connection's error): subscribe again
        with self.lock:
            self.r.subscribe_retries[type(exc).__name__] += 1

    async def _consume(self, c: SoakConfig) -> None:
        async with self.client() as client:
            while True:
                sub = client.subscribe(self.queue, ack="client-individual", buffer_size=c.buffer_size)
                try:
                    await sub.__aenter__()
                    break
                except ConnectionLostError as exc:
                    self._subscribe_failed(exc)
            try:
                async for message in sub:
                    self._record(message)
                    try:
                        await message.ack()
                    except StompError as exc:
                        self._ack_failed(exc)
                    if not self.consuming:
                        break
            finally:
                await sub.aclose()

    def sync_consumer(self) -> None:
        """The consumer with the blocking client (in a worker thread)."""
        with self.failure("consumer"), self.sync_client() as client:
            while True:
                try:
                    sub = client.subscribe(self.queue, ack="client-individual",
                                           buffer_size=self.c.buffer_size)
                    break
                except ConnectionLostError as exc:
                    self._subscribe_failed(exc)
            with sub:
                while self.consuming:
                    try:
                        message = sub.receive(timeout=0.2)
                    except ReceiveTimeout:
                        continue
                    self._record(message)
                    try:
                        message.ack(timeout=60)
                    except StompError as exc:
                        self._ack_failed(exc)

    # ------------------------------------------------------------------ chaos and measurement

    async def resets(self) -> None:
        while True:
            await anyio.sleep(self.c.reset_every * self.rng.uniform(0.75, 1.25))
            self.r.fault_rounds += 1
            kind = self.rng.choice(self.c.faults)
            if kind == "reset":
                self.proxy.reset_all()
            elif kind == "cut":
                offset = self.rng.randint(1, 80)
                self.proxy.set(reset=Trigger(frame=1, offset=offset, direction="down"))
                await anyio.sleep(0.2)
                self.proxy.set(reset=None)
            elif kind == "half_close":
                self.proxy.half_close_all(self.rng.choice(["up", "down"]))
            elif kind == "outage":  # the broker unreachable for 1-5 s: every link, and every new one, reset
                self.proxy.set(reset=Trigger(bytes=0, direction="up"))
                await anyio.sleep(self.rng.uniform(1.0, 5.0))
                self.proxy.set(reset=None)
            elif kind == "stall":
                self.proxy.set(stall="both")
                await anyio.sleep(self.rng.uniform(0.5, 4.0))
                self.proxy.set(stall=None)
            else:
                raise ValueError(f"unknown fault {kind!r}")

    async def restarts(self) -> None:
        n = self.c.restarts
        for k in range(1, n + 1):
            at = self.t0 + k * self.c.seconds / (n + 1)
            await anyio.sleep(max(0.0, at - time.monotonic()))
            self.say(f"restarting the broker ({k} of {n})")
            try:
                took = await anyio.to_thread.run_sync(self.c.restart)
            except Exception as exc:  # recorded (the run fails), but the run goes on to its summary
                self.r.errors.append(f"broker restart {k} failed: {exc!r}")
                self.say(f"broker restart {k} failed: {exc!r}")
                continue
            self.r.restarts.append(took)
            self.say(f"broker back after {took:.1f} s")

    async def rss(self) -> None:
        warm_at = self.t0 + self.c.seconds / 4
        while True:
            now_rss = rss_bytes()
            if not self.r.rss_warm and time.monotonic() >= warm_at:
                self.r.rss_warm = self.r.rss_peak = now_rss
            if self.r.rss_warm:
                self.r.rss_peak = max(self.r.rss_peak, now_rss)
            await anyio.sleep(0.5)

    async def report(self) -> None:
        while True:
            await anyio.sleep(10)
            self.say(f"confirmed {self.r.confirmed}, received {self.r.unique} unique / {self.r.received}, "
                     f"re-sends {self.r.resends}, resets {self.proxy.stats.faults.get('reset', 0)}, "
                     f"RSS {rss_bytes() / 1048576:.0f} MB")


async def run_soak(config: SoakConfig) -> SoakResult:
    """One soak run in the current event loop (any anyio backend)."""
    ep = parse_url(config.url)
    async with FaultProxy((ep.host, ep.port)) as proxy:
        run = _Run(config, proxy)
        r = run.r
        r.rss_start = rss_bytes()
        run.t0 = time.monotonic()
        threads = anyio.CapacityLimiter(config.producers + config.consumers + 1)
        chaos: List[anyio.CancelScope] = []  # the faults: cancelled before the drain
        watch: List[anyio.CancelScope] = []  # RSS sampling and progress: cancelled at the end

        async def in_scope(scopes: List[anyio.CancelScope], fn: Callable[[], Any]) -> None:
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await fn()

        async with anyio.create_task_group() as tg:
            try:
                tg.start_soon(in_scope, watch, run.rss)
                tg.start_soon(in_scope, watch, run.report)
                for _ in range(config.consumers):
                    if config.client == "sync":
                        tg.start_soon(partial(anyio.to_thread.run_sync, run.sync_consumer, limiter=threads))
                    else:
                        tg.start_soon(run.consumer)
                for _ in range(config.producers):
                    if config.client == "sync":
                        tg.start_soon(partial(anyio.to_thread.run_sync, run.sync_producer, limiter=threads))
                    else:
                        tg.start_soon(run.producer)
                tg.start_soon(in_scope, chaos, run.resets)
                if config.restarts:
                    tg.start_soon(in_scope, chaos, run.restarts)
                limit = config.seconds * 2 + 120
                with anyio.move_on_after(limit):
                    while r.confirmed < config.messages:
                        await anyio.sleep(0.05)
                if r.confirmed < config.messages:
                    r.errors.append(f"not every message was confirmed within {limit:.0f} s "
                                    f"({r.confirmed} were)")
                run.say(f"{r.confirmed} of {config.messages} confirmed")
                remaining = config.seconds - (time.monotonic() - run.t0)
                if remaining > 0:  # the messages went faster than the schedule: keep the faults going
                    await anyio.sleep(remaining)
                run.producing = False
                for scope in chaos:  # no more faults (a restart under way finishes) while the consumers drain
                    scope.cancel()
                with anyio.move_on_after(config.drain_timeout):
                    while r.unique < r.confirmed:
                        await anyio.sleep(0.05)
                    # then whatever copies are still queued (late duplicates), until quiet for 2 s
                    while time.monotonic() - run.last_received < 2.0:
                        await anyio.sleep(0.2)
                run.say(f"drained: {r.unique} unique of {config.messages}")
                for scope in watch:
                    scope.cancel()
                run.consuming = False  # the blocking consumers see it within a receive timeout
                tg.cancel_scope.cancel()
            finally:  # the blocking clients' threads cannot be cancelled: they stop on these flags
                run.producing = run.consuming = False

        r.errors.extend(f"proxy: {exc!r}" for exc in proxy.errors)
        r.link_faults = Counter(proxy.stats.faults)
        r.link_resets = r.link_faults["reset"]
    r.duration = time.monotonic() - run.t0
    r.reconnects = sum(c.reconnects for c in run.clients)
    r.rss_end = rss_bytes()
    r.rss_peak = max(r.rss_peak, r.rss_warm)
    r.lost = sum(1 for seq in range(config.messages) if run.confirmed[seq] and not run.copies[seq])
    return r


def summary_problems(result: SoakResult) -> Dict[str, Any]:
    return {"summary": result.summary(), "problems": result.problems()}
