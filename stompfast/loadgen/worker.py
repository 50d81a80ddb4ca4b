"""One worker: its consumer and producer connections as tasks of one event loop, driven by the coordinator.

The phases and messages it goes through are described in :mod:`stompfast.loadgen`.
"""

from __future__ import annotations

import gc
import time
from contextlib import AsyncExitStack
from typing import Any, Callable, Dict, List, Optional, Tuple

import anyio

from .._brokers import NACK_LOSES, broker_of
from ..errors import ConfigurationError, StaleMessageError
from .behaviour import ConsumerBehaviour
from .clientstats import merge_records, stats_record
from .config import H_PRODUCER, H_SEQ, H_TS, H_WARMUP, LoadConfig, run_queue_headers
from .histogram import COUNTS_LEN, HALF_COUNT, HALF_MAGNITUDE, SHIFT, SUB_MASK, new_histogram
from .plan import WorkerSpec, group_name
from .producer import ProducerState, send_all
from .timeline import Recorder, max_present, min_present

# Seconds between a worker's progress reports / the coordinator's checks
TICK = 0.05
# Seconds between the clients' metrics in the progress reports
STATS_EVERY = 1.0


class SubState:
    __slots__ = ("group", "seen", "received", "distinct", "unexpected", "warmup", "measured", "nacked", "stale",
                 "first", "last", "consumer", "log")

    def __init__(self, group: str, seen: Dict[str, bytearray], consumer: int) -> None:
        self.group = group
        # Producer key -> bitmap of sf-seq values (shared by a queue's consumers)
        self.seen = seen
        # The consumer's index in the run (its behaviour's random generator is seeded with it)
        self.consumer = consumer
        self.received = self.distinct = self.unexpected = self.warmup = self.measured = self.nacked = 0
        # Acks refused as stale: the message came from a connection lost since (a failover run)
        self.stale = 0
        # A failover run: every delivery as (producer index, seq, receive ns, latency us); else None
        self.log: Optional[List[Tuple[int, int, int, int]]] = None
        self.first: Optional[int] = None
        self.last: Optional[int] = None


class Worker:
    """One worker: its producers and consumers as tasks of one event loop, driven through ``link``."""

    def __init__(self, spec: WorkerSpec, link: Any) -> None:
        self.spec = spec
        self.link = link
        self.config = spec.config
        self.errors: List[str] = []
        self.error_count = 0
        self.producers = [ProducerState(ps, len(spec.destinations)) for ps in spec.producers]
        self.groups: Dict[str, Dict[str, bytearray]] = {}
        self.subs: List[Tuple[Any, SubState]] = []
        # Every connection, for its client.stats()
        self.clients: List[Any] = []
        self.stats_due = 0.0
        self.recorder: Optional[Recorder] = None
        self.consumers_alive = 0
        self.stopping = False
        self.info: Dict[str, Any] = {}
        #: RabbitMQ and the run's own queue: the headers that make it auto-delete, on every
        #: SUBSCRIBE and SEND (set once the first CONNECTED named the broker)
        self.queue_headers: Optional[Dict[str, str]] = None
        #: instruments each client made (``LoadConfig.trace``), or None: nothing on the send path either way
        # Set in run()
        self.instrument: Optional[Callable[[Any], Any]] = None

    def _error(self, text: str) -> None:
        self.error_count += 1
        if self.recorder is not None:
            self.recorder.errors += 1
        if len(self.errors) < 20:
            self.errors.append(text)

    def _client(self) -> Any:
        from .._client import AsyncClient
        from .._reconnect import ReconnectPolicy

        c = self.config
        kwargs: Dict[str, Any] = {}
        if c.versions:
            kwargs["versions"] = c.versions
        # persistent=False: a run's messages are the broker's default, not persistent, on every
        # broker (runs stay comparable); -H persistent:true asks for persistence (docs/loadgen.md)
        # A failover run cuts the links on purpose: its clients reconnect at once
        reconnect: Any = ReconnectPolicy(initial_delay=0.05, max_delay=1.0) if c.link_cuts else False
        client = AsyncClient(
            self.spec.url, login=c.login, passcode=c.passcode, virtual_host=c.virtual_host,
            heart_beat=c.heart_beat, connect_timeout=c.connect_timeout, reconnect=reconnect, persistent=False,
            **kwargs,
        )
        if self.instrument is not None:
            # Traced methods on this client object: the producer loop is unchanged
            self.instrument(client)
        return client

    async def run(self) -> None:
        spec = self.spec
        async with AsyncExitStack() as stack:
            try:
                if self.config.trace:
                    self.instrument = trace_instrumenter(self.config)
                for c in spec.consumers:
                    client = await stack.enter_async_context(self._client())
                    self.clients.append(client)
                    self.info.setdefault("server", client.server)
                    self.info.setdefault("version", client.version)
                    self.queue_headers = run_queue_headers(self.config, self.info["server"])
                    _check_nack_requeues(self.config, client.server)
                    for d, destination in enumerate(spec.destinations):
                        group = group_name(d, spec.fanout[d], c)
                        seen = self.groups.get(group)
                        if seen is None:
                            seen = self.groups[group] = {key: bytearray() for key in spec.all_producer_keys}
                        sub = await stack.enter_async_context(
                            client.subscribe(destination, ack=self.config.ack, buffer_size=self.config.buffer_size,
                                             headers=self.queue_headers)
                        )
                        state = SubState(group, seen, c)
                        if self.config.link_cuts:
                            state.log = []
                        self.subs.append((sub, state))
                clients = []
                for _ in self.producers:
                    client = await stack.enter_async_context(self._client())
                    self.clients.append(client)
                    self.info.setdefault("server", client.server)
                    self.info.setdefault("version", client.version)
                    self.queue_headers = run_queue_headers(self.config, self.info["server"])
                    clients.append(client)
            except Exception as exc:
                self.link.put(("fatal", exc))
                return
            self.link.put(("ready", dict(self.info)))
            # Every connection is set up: its objects live as long as the run, and a full
            # garbage collection would walk them all (with a thousand producers at a message a
            # second each, p99 392 ms without this, 199 ms with it, measured). Frozen, the
            # collector leaves them out until the end.
            gc.freeze()
            try:
                t0 = await self._wait_for_go()
                if t0 is None:
                    return
                await self._run(t0, clients, stack)
            finally:
                gc.unfreeze()

    async def _run(self, t0: int, clients: List[Any], stack: AsyncExitStack) -> None:
        """The run itself, from ``t0`` (wall ns): producers, consumers and the reporter; then the final report."""
        self.recorder = Recorder(t0, int(self.config.interval * 1e9))
        delay = (t0 - time.time_ns()) / 1e9
        if delay > 0:
            await anyio.sleep(delay)
        async with anyio.create_task_group() as tg:
            consumers = anyio.CancelScope()
            producers = anyio.CancelScope()
            tg.start_soon(self._consumers, consumers)
            tg.start_soon(self._producers, producers, clients, t0)
            tg.start_soon(self._reporter, consumers, producers)
        # What arrived before the stop still counts
        for sub, st in self.subs:
            try:
                while sub.pending:
                    batch = await sub.receive_batch(self.config.buffer_size)
                    self._take(st, batch, time.time_ns())
                    await self._ack(batch, st)
            except Exception:
                pass
        self.recorder.close()
        final = self._final()
        try:
            # each client bounds its own DISCONNECT wait (shielded); no scope may wrap
            # this: the clients' task groups were entered before it
            await stack.aclose()
        # DISCONNECT trouble is worth a line, not a failure of the run
        except Exception as exc:
            final["close_warning"] = f"closing connections: {exc!r}"
        # After DISCONNECT: every frame counted
        final["client_stats"] = self._client_stats()
        self.link.put(("final", final))

    async def _wait_for_go(self) -> Optional[int]:
        while True:
            for message in self.link.poll():
                if message[0] == "go":
                    # An order's items are Any: the pipe carries tuples
                    start: Optional[int] = message[1]
                    return start
                if message[0] in ("stop", "abort"):
                    return None
            await anyio.sleep(0.002)

    async def _reporter(self, consumers: anyio.CancelScope, producers: anyio.CancelScope) -> None:
        rec = self.recorder
        assert rec is not None
        while True:
            await anyio.sleep(TICK)
            now = time.time_ns()
            if now >= rec.next_boundary:
                rec.roll(now)
            stop = False
            for message in self.link.poll():
                if message[0] in ("stop", "abort"):
                    stop = True
            if stop:
                producers.cancel()
                consumers.cancel()
                return
            snapshot = self._snapshot()
            mono = time.monotonic()
            if mono >= self.stats_due:
                self.stats_due = mono + STATS_EVERY
                snapshot["client_stats"] = self._client_stats()
            self.link.put(("progress", snapshot))

    def _snapshot(self) -> Dict[str, Any]:
        rec = self.recorder
        by_dest = [0] * len(self.spec.destinations)
        for ps in self.producers:
            for d, n in enumerate(ps.by_dest):
                by_dest[d] += n
        return {
            "sent": sum(ps.sent for ps in self.producers),
            "sent_by_dest": by_dest,
            "confirmed": sum(ps.confirmed for ps in self.producers),
            "received": sum(st.received for _, st in self.subs),
            "nacked": sum(st.nacked for _, st in self.subs),
            "distinct": sum(st.distinct for _, st in self.subs),
            "errors": self.error_count,
            "producers_done": all(ps.done for ps in self.producers),
            "consumers_alive": self.consumers_alive,
            "intervals": rec.take() if rec is not None else [],
        }

    def _client_stats(self) -> Dict[str, Any]:
        """The sum of this worker's clients' metrics (``client.stats()``): see :mod:`.clientstats`."""
        return merge_records(stats_record(client.stats()) for client in self.clients)

    def _final(self) -> Dict[str, Any]:
        snap = self._snapshot()
        per_group: Dict[str, int] = {}
        for _, st in self.subs:
            per_group[st.group] = per_group.get(st.group, 0) + st.received - st.unexpected
        lag = None
        for ps in self.producers:
            if ps.lag is not None and ps.lag.get_total_count():
                if lag is None:
                    lag = new_histogram()
                lag.add(ps.lag)
        times = {
            "send_first": min_present(ps.first for ps in self.producers),
            "send_last": max_present(ps.last for ps in self.producers),
            "receive_first": min_present(st.first for _, st in self.subs),
            "receive_last": max_present(st.last for _, st in self.subs),
        }
        snap.update(
            sent_by={ps.spec.key: list(ps.by_dest) for ps in self.producers},
            measured_sent=sum(ps.measured for ps in self.producers),
            warmup_sent=sum(ps.warmup_sent for ps in self.producers),
            measured_received=sum(st.measured for _, st in self.subs),
            warmup_received=sum(st.warmup for _, st in self.subs),
            unexpected=sum(st.unexpected for _, st in self.subs),
            received_by_group=per_group,
            seen={group: {key: bytes(bm) for key, bm in seen.items() if bm} for group, seen in self.groups.items()},
            stale=sum(st.stale for _, st in self.subs),
            deliveries=[st.log for _, st in self.subs if st.log is not None],
            lag=lag.encode() if lag is not None else None,
            error_texts=list(self.errors),
            times=times,
        )
        return snap

    # -- consumers ------------------------------------------------------------------------

    async def _consumers(self, scope: anyio.CancelScope) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                for sub, st in self.subs:
                    self.consumers_alive += 1
                    tg.start_soon(self._consume, sub, st)

    async def _consume(self, sub: Any, st: SubState) -> None:
        if self.config.consumer_behaviour:
            await self._consume_as_told(sub, st)
            return
        receive_batch = sub.receive_batch
        take, ack = self._take, self._ack
        time_ns = time.time_ns
        n = self.config.buffer_size
        acking = self.config.ack != "auto"
        try:
            while True:
                batch = await receive_batch(n)
                take(st, batch, time_ns())
                if acking:
                    await ack(batch, st)
        except Exception as exc:
            self._error(f"consumer of {sub.destination}: {type(exc).__name__}: {exc}")
        finally:
            self.consumers_alive -= 1

    async def _consume_as_told(self, sub: Any, st: SubState) -> None:
        """:meth:`_consume` with the consumers' behaviour (:mod:`.behaviour`): pauses, processing, NACKs."""
        config = self.config
        assert self.recorder is not None
        behaviour = ConsumerBehaviour(config.processing_time, config.nack_share, config.consumer_pauses,
                                      self.recorder.t0, st.consumer)
        acking = config.ack != "auto"
        try:
            while True:
                await behaviour.pause_if_due()
                batch = await sub.receive_batch(config.buffer_size)
                # a pause that began while this consumer waited for the batch
                await behaviour.pause_if_due()
                if not behaviour.per_message:
                    self._take(st, batch, time.time_ns())
                    if acking:
                        await self._ack(batch, st)
                    continue
                for message in batch:
                    if behaviour.nacks():
                        # not counted as received: the redelivery is
                        await message.nack()
                        st.nacked += 1
                        continue
                    self._take(st, [message], time.time_ns())
                    seconds = behaviour.processing_seconds()
                    if seconds:
                        await anyio.sleep(seconds)
                    if acking:
                        await self._ack([message], st)
                    await behaviour.pause_if_due()
        except Exception as exc:
            self._error(f"consumer of {sub.destination}: {type(exc).__name__}: {exc}")
        finally:
            self.consumers_alive -= 1

    def _take(self, st: SubState, batch: List[Any], now: int) -> None:
        """Count one batch of messages received at ``now`` (wall ns): the consumers' hot path."""
        rec = self.recorder
        assert rec is not None
        if now >= rec.next_boundary:
            rec.roll(now)
        counts = rec.counts
        seen = st.seen
        log = st.log
        distinct = unexpected = warm = 0
        for message in batch:
            # Frame is a tuple (command, headers dict, body, repeats): frames.py documents it
            h = message.frame[1]
            bitmap = seen.get(h.get(H_PRODUCER))
            if bitmap is None:
                unexpected += 1
                continue
            try:
                seq = int(h[H_SEQ])
                ts = int(h[H_TS])
            except (KeyError, ValueError):
                unexpected += 1
                continue
            i = seq >> 3
            bit = 1 << (seq & 7)
            if i >= len(bitmap):
                if seq < 0:
                    unexpected += 1
                    continue
                bitmap.extend(bytes(i + 1 - len(bitmap) + 4096))
            if not bitmap[i] & bit:
                bitmap[i] |= bit
                distinct += 1
            if log is not None:
                log.append((int(h[H_PRODUCER].rpartition(".")[2]), seq, now, max(0, (now - ts) // 1000)))
            if H_WARMUP in h:
                warm += 1
                continue
            latency = (now - ts) // 1000
            # A clock step: count it as no delay at all
            if latency < 0:
                latency = 0
            # latency_index, inlined
            b = (latency | SUB_MASK).bit_length() - SHIFT
            try:
                counts[((b + 1) << HALF_MAGNITUDE) + (latency >> b) - HALF_COUNT] += 1
            # Beyond an hour: clamp into range
            except IndexError:
                counts[COUNTS_LEN - 1] += 1
        n = len(batch)
        st.received += n
        st.distinct += distinct
        st.unexpected += unexpected
        st.warmup += warm
        measured = n - unexpected - warm
        if measured:
            st.measured += measured
            if st.first is None:
                st.first = now
            st.last = now
        rec.received += n
        rec.warmup += warm
        rec.recorded += measured

    async def _ack(self, batch: List[Any], st: SubState) -> None:
        try:
            if self.config.ack == "client":
                # Cumulative
                await batch[-1].ack()
            elif self.config.ack == "client-individual":
                for message in batch:
                    await message.ack()
        except StaleMessageError:
            # From a connection lost since (a failover run): the broker redelivers it
            st.stale += 1

    # -- producers ------------------------------------------------------------------------

    async def _producers(self, scope: anyio.CancelScope, clients: List[Any], t0: int) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                for ps, client in zip(self.producers, clients):
                    tg.start_soon(self._produce, ps, client, t0)

    async def _produce(self, ps: ProducerState, client: Any, t0: int) -> None:
        try:
            await send_all(ps, client, t0, self.spec, self.recorder, self.queue_headers)
            with anyio.fail_after(max(30.0, self.config.drain_timeout)):
                # DISCONNECT, confirmed: the broker has every frame before it
                await client.aclose()
            if not ps.spec.rate and ps.measured:
                # closed loop: "sent" means taken by the broker, not queued in our buffer
                ps.last = time.time_ns()
        except Exception as exc:
            self._error(f"producer {ps.spec.index}: {type(exc).__name__}: {exc}")
        finally:
            ps.done = True


def trace_instrumenter(config: LoadConfig) -> Callable[[Any], Any]:
    """``LoadConfig.trace``: a function that instruments a client (tracing only), the provider made in this process."""
    import stompfast.otel as otel

    provider = otel.tracer_provider_from_environment(config.trace_exporter)

    def instrument(client: Any) -> Any:
        return otel.instrument(client, tracer_provider=provider, metrics=False)

    return instrument


async def worker_main(spec: WorkerSpec, link: Any) -> None:
    await Worker(spec, link).run()


def _check_nack_requeues(config: LoadConfig, server: Optional[str]) -> None:
    """Refuse a NACK share on a broker that does not requeue a NACKed message: it would read as lost."""
    broker = broker_of(server)
    if config.nack_share and broker in NACK_LOSES:
        raise ConfigurationError(
            f"--nack-share needs a broker that requeues a NACKed message: {NACK_LOSES[broker]} (docs/brokers.md)"
        )
