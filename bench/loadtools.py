#!/usr/bin/env python
"""stompfast bench beside the brokers' own load tools: same broker, same machine, same size.

Run from the repository root, with the brokers up (``bash scripts/brokers.sh start``) and the
venv active::

    python bench/loadtools.py                      # default profile: 20 s runs, about 6 minutes
    python bench/loadtools.py --quick              # 5 s runs, about 2 minutes
    python bench/loadtools.py --pairs artemis --size 1024 --rates 1000,10000 --duration 30
    python bench/loadtools.py --json > loadtools.json        # one JSON document, nothing else on stdout
    python bench/loadtools.py --markdown           # the table as Markdown (for docs/loadgen.md)

Pairs (``--pairs``, comma-separated; default ``perftest,artemis,omq``):

* ``perftest``: RabbitMQ PerfTest (``com.rabbitmq:perf-test``, the newest version Maven Central
  lists that Maven can resolve, with its dependencies: Maven Central has no uber jar of it) over
  AMQP 0.9.1 on RabbitMQ's 5672, beside ``stompfast bench`` on the same node's STOMP 61613.
* ``artemis``: ``artemis perf client`` (JMS over the CORE protocol) from the Artemis distribution
  that scripts/brokers.sh unpacked under .brokers/ (fetched with Maven into the cache when there
  is none), beside ``stompfast bench``, both against a throwaway Artemis instance that this script
  creates in the cache, starts on a free loopback port (default 61720) with one acceptor for CORE
  and STOMP, warms up with ``--broker-warmup`` seconds of each tool (not measured: a fresh JVM
  broker runs interpreted at first, and whichever tool came first would pay for it), and stops at
  the end. The shared Artemis on 61618 accepts STOMP only, so it is not used.
* ``omq``: RabbitMQ's omq (``go install github.com/rabbitmq/omq@latest``), ``omq stomp-stomp``
  on RabbitMQ's STOMP 61613, beside ``stompfast bench`` on the same port. Not measured yet: the Go
  module proxy refused the module when this was written (403, "not available"), so the pair is
  skipped with that reason; were it installed, the pair still says it is not parsed yet.

A pair whose tool cannot be had (no java, no mvn, nothing downloads, the broker is down) is
skipped with the reason; the others still run. What is fetched goes to ``--cache``
(default ``.bench-cache/`` in the repository: keep it out of git).

What is measured, for each pair, one tool after the other in the same run (the machine is shared
and noisy: compare the ratio, not the absolute numbers):

1. **max rate**: each tool's max-throughput mode: 1 producer, 1 consumer, one queue, no rate
   limit, ``--duration`` seconds, ``--size``-byte bodies, non-persistent messages, auto-ack.
   Messages received per second **while the producer sends**, the same definition for every
   tool: the mean of the tool's own per-second ``received`` figures from the end of the warm-up
   (``--warmup`` s) to the end of ``--duration`` (PerfTest's per-second lines, ``artemis perf``'s
   intervals outside its ``--warmup``, stompfast's JSON ``timeline``). A tool's own headline
   figure is shown as a note: stompfast's ``receive_msgs_per_s`` runs from the first to the last
   measured message, so after a closed-loop run that built a backlog it includes the drain,
   and PerfTest stops at ``-z`` without draining.
   ``artemis perf`` runs as its documentation tunes it for throughput (``--max-pending 100``,
   ``confirmationWindowSize=20000`` on the producer URL); its default (one message in flight)
   is several times slower.
2. **CPU per message**: CPU seconds (user + sys) of the tool's whole process tree, from
   ``resource.getrusage(RUSAGE_CHILDREN)`` around the subprocess, divided by every message it
   **received** (warm-up included), in microseconds. It includes starting the JVM or the Python
   interpreter, JIT compilation and the drain after the producers stop, for both sides alike:
   read it at the default profile's 20 s, where start-up weighs less. The broker's CPU per
   received message over the same run is shown too (from /proc of the process listening on the
   port: RabbitMQ's beam.smp serves AMQP and STOMP alike, and the Artemis instance is ours).
3. **latency at a fixed rate** (``--rates``, default 1,000 and 5,000 msgs/s), as each tool
   reports it: p50, p99, and max where the tool gives one. They do not measure the same thing:

   * PerfTest: the producer writes ``System.nanoTime()`` into the body when it actually sends,
     the consumer subtracts it on delivery; the summary percentiles cover the whole run
     (there is no warm-up option) and there is no max;
   * ``artemis perf``: "transfer time", from a ``time`` property set to the actual send time
     to the consumer's listener, outside ``--warmup``; its lateness behind schedule is a separate
     "delay send time" (shown as a note);
   * stompfast bench: from each message's **intended** send time on the fixed schedule to its
     delivery, outside ``--warmup`` (so a stall of the producer counts in every message it
     delayed: no coordinated omission). Its ``send_lag_us`` p99 is shown as a note.

   So at a rate the producer keeps easily the three are comparable; when the producer falls
   behind, stompfast's figure grows and the others' do not.

Every ratio is stompfast / peer: above 1 is stompfast faster for the rate, and stompfast costlier
or slower for CPU and latency.

Each tool's raw output is kept under ``<cache>/loadtools/runs/<time>/`` (``--no-keep`` to drop);
the parsing of each tool's output is in small pure functions (``parse_*``), tested on captured
real output by bench/test_loadtools.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tables import print_table  # noqa: E402
from client_compare import listener_pid, proc_cpu  # noqa: E402  (the broker's pid and CPU, from /proc)

REPO = Path(__file__).resolve().parent.parent
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
PERFTEST_FALLBACK_VERSIONS = ("2.22.1",)
ARTEMIS_FETCH_VERSION = "2.40.0"
OMQ_MODULE = "github.com/rabbitmq/omq@latest"
ALL_PAIRS = ("perftest", "artemis", "omq")

PROFILES = {  # name -> (duration s, warm-up s)
    "default": (20.0, 5.0),
    "quick": (5.0, 1.0),
}

LATENCY_MEANING = {
    "perftest": "PerfTest: producer's nanoTime in the body at the actual send -> consumer; whole run, no max",
    "artemis": "artemis perf 'transfer time': actual send time (message property) -> consumer listener; after --warmup",
    "omq": "omq: producer timestamp in the message at the actual send -> consumer",
    "stompfast": "stompfast bench: intended send time on the fixed schedule -> delivery; after --warmup",
}


class Unavailable(Exception):
    """A tool or a broker that cannot be had here; the pair is skipped with this reason."""


# ---------------------------------------------------------------------------------------------
# Parsing: pure functions of a tool's output text


_PT_VERSION = re.compile(r"RabbitMQ Perf Test (\S+)")
_PT_INTERVAL = re.compile(
    r"time:? (?P<t>[\d.]+) ?s, sent: (?P<sent>\d+) msg/s, received: (?P<recv>\d+) msg/s")
_PT_RATE = re.compile(r"(sending|receiving) rate avg: (\d+) msg/s")
_PT_LATENCY = re.compile(
    r"consumer latency min/median/75th/95th/99th (?P<vals>[\d/.]+) (?P<unit>µs|us|ms)\s*$", re.M)


def parse_perftest_version(text: str) -> Optional[str]:
    """PerfTest's version from its banner (``RabbitMQ Perf Test 2.22.1 (...)``)."""
    m = _PT_VERSION.search(text)
    return m.group(1) if m else None


def parse_perftest_intervals(text: str) -> List[Tuple[float, int, int]]:
    """PerfTest's per-second lines: (elapsed s, sent msgs/s, received msgs/s)."""
    return [(float(m["t"]), int(m["sent"]), int(m["recv"])) for m in _PT_INTERVAL.finditer(text)]


def parse_perftest_summary(text: str) -> Dict[str, Any]:
    """PerfTest's closing lines: average rates and the consumer latency percentiles in µs.

    ``{"send_rate": 19620, "receive_rate": 19583, "latency_us": {"min": .., "p50": .., "p75": ..,
    "p95": .., "p99": ..}}``; a key is missing when its line is (a run that failed)."""
    out: Dict[str, Any] = {}
    for kind, value in _PT_RATE.findall(text):
        out["send_rate" if kind == "sending" else "receive_rate"] = int(value)
    m = _PT_LATENCY.search(text)
    if m:
        scale = 1000.0 if m["unit"] == "ms" else 1.0
        vals = [float(v) * scale for v in m["vals"].split("/")]
        out["latency_us"] = dict(zip(("min", "p50", "p75", "p95", "p99"), vals))
    return out


def perftest_figures(text: str, warmup: float, duration: float) -> Dict[str, Any]:
    """What the table needs from one PerfTest run: the received rate while producing (the mean of
    its per-second figures after the warm-up, up to the duration), messages received in all (the
    per-second rates times their intervals), latency, version."""
    intervals = parse_perftest_intervals(text)
    summary = parse_perftest_summary(text)
    after = [r for t, _, r in intervals if warmup + 0.5 < t <= duration + 0.5] or [r for _, _, r in intervals]
    received, prev = 0.0, 0.0
    for t, _, r in intervals:
        received += r * (t - prev)
        prev = t
    return {
        "version": parse_perftest_version(text),
        "receive_rate": sum(after) / len(after) if after else None,
        "received": int(round(received)),
        "latency_us": summary.get("latency_us"),
        "own_rate": summary.get("receive_rate"),
        "summary": summary,
    }


_AP_INTERVAL = re.compile(r"--- warmup (?P<warmup>true|false)\s*\n(?P<body>(?:--- (?!warmup|SUMMARY).*\n?)*)")
_AP_LINE_RATE = re.compile(r"--- (?P<name>sent|blocked|completed|received):\s+(?P<v>\d+) msg/sec")
_AP_TOTAL = re.compile(r"--- total (?P<name>sent|blocked|completed|received):\s+(?P<v>\d+)")
_AP_HIST = re.compile(r"--- aggregated (?P<name>delay send|send|transfer) time:\s+(?P<body>.*)$", re.M)
_AP_PCT = re.compile(r"(?P<k>mean|max|[\d.]+%):\s+(?P<v>[\d.]+) us")
_AP_RESULT = re.compile(r"--- result:\s+(\S+)")


def parse_artemis_histogram(body: str) -> Dict[str, float]:
    """One ``mean: 259.35 us - 50.00%: 45.00 us - ... - max: 109567.00 us`` line, in µs:
    keys ``mean``, ``p50``, ``p90``, ``p99``, ``p99.9``, ``p99.99``, ``max``."""
    out: Dict[str, float] = {}
    for m in _AP_PCT.finditer(body):
        k = m["k"]
        if k.endswith("%"):
            k = "p" + ("%g" % float(k[:-1]))
        out[k] = float(m["v"])
    return out


def parse_artemis_intervals(text: str) -> List[Dict[str, Any]]:
    """``artemis perf client``'s per-second blocks: ``{"warmup": bool, "sent": .., "received": ..}``."""
    out = []
    for m in _AP_INTERVAL.finditer(text):
        block: Dict[str, Any] = {"warmup": m["warmup"] == "true"}
        for r in _AP_LINE_RATE.finditer(m["body"]):
            block[r["name"]] = int(r["v"])
        out.append(block)
    return out


def parse_artemis_summary(text: str) -> Dict[str, Any]:
    """The ``--- SUMMARY`` block: result, totals, and the aggregated histograms (µs) under
    ``send``, ``transfer`` and (with ``--rate``) ``delay send``."""
    _, _, tail = text.partition("--- SUMMARY")
    if not tail:
        return {}
    out: Dict[str, Any] = {"totals": {}, "latency_us": {}}
    m = _AP_RESULT.search(tail)
    out["result"] = m.group(1) if m else None
    for t in _AP_TOTAL.finditer(tail):
        out["totals"][t["name"]] = int(t["v"])
    for h in _AP_HIST.finditer(tail):
        out["latency_us"][h["name"]] = parse_artemis_histogram(h["body"])
    return out


def artemis_figures(text: str, warmup: float, duration: float) -> Dict[str, Any]:
    """What the table needs from one ``artemis perf client`` run: the received rate while
    producing (the mean of its per-second figures outside its warm-up, at most duration - warm-up
    of them: any later ones are the drain), messages received, latency."""
    intervals = parse_artemis_intervals(text)
    summary = parse_artemis_summary(text)
    measured = [b["received"] for b in intervals if not b["warmup"] and "received" in b]
    measured = measured[:max(1, int(round(duration - warmup)))]
    transfer = summary.get("latency_us", {}).get("transfer")
    delay = summary.get("latency_us", {}).get("delay send")
    return {
        "receive_rate": sum(measured) / len(measured) if measured else None,
        "received": summary.get("totals", {}).get("received"),
        "result": summary.get("result"),
        "latency_us": transfer,
        "send_delay_us": delay,
    }


_ART_VERSION = re.compile(r"Apache ActiveMQ Artemis Message Broker version (\S+)")


def parse_artemis_broker_version(log: str) -> Optional[str]:
    """The broker's version from its log (``... Message Broker version 2.40.0 [name, ...]``)."""
    m = _ART_VERSION.search(log)
    return m.group(1) if m else None


def sustained_rate(timeline: Sequence[Dict[str, Any]], warmup: float, duration: float) -> Optional[float]:
    """The mean of a stompfast timeline's per-interval ``receive_rate`` (every message, warm-up
    ones too, as the other tools count theirs) over the intervals that start in [warmup, duration):
    while the producers send, leaving out the drain after them."""
    rates = [iv["receive_rate"] for iv in timeline
             if warmup - 1e-6 <= iv.get("t", -1) < duration - 1e-6 and iv.get("receive_rate") is not None]
    return sum(rates) / len(rates) if rates else None


def parse_stompfast_json(text: str, warmup: float, duration: float) -> Dict[str, Any]:
    """What the table needs from ``stompfast bench --json``: ``receive_rate`` as for the other tools
    (per-second figures while producing), ``own_rate`` its ``rates.receive_msgs_per_s``."""
    d = json.loads(text)
    lat = d.get("latency_us") or {}
    lag = d.get("send_lag_us") or {}
    rates = d.get("rates") or {}
    return {
        "ok": d.get("ok"),
        "version": (d.get("versions") or {}).get("stompfast"),
        "server": (d.get("broker") or {}).get("server"),
        "receive_rate": sustained_rate(d.get("timeline") or [], warmup, duration),
        "own_rate": rates.get("receive_msgs_per_s"),
        "send_rate": rates.get("send_msgs_per_s"),
        "received": (d.get("counts") or {}).get("received"),
        "latency_us": {k: lat.get(k) for k in ("p50", "p99", "max")} if lat else None,
        "send_lag_us": {k: lag.get(k) for k in ("p50", "p99", "max")} if lag else None,
        "problems": d.get("problems") or [],
    }


def parse_maven_versions(metadata_xml: str) -> List[str]:
    """The versions a Maven ``maven-metadata.xml`` lists, newest first (numeric ordering)."""
    root = ET.fromstring(metadata_xml)
    versions = [v.text.strip() for v in root.iter("version") if v.text]

    def key(v: str) -> Tuple[Any, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.-]", v))

    return sorted(set(versions), key=key, reverse=True)


# ---------------------------------------------------------------------------------------------
# Running a tool and measuring its CPU


@dataclass
class Run:
    """One tool's run: its output, wall time, CPU of its process tree, broker CPU."""
    cmd: List[str]
    rc: int
    stdout: str
    stderr: str
    wall: float
    cpu: float
    broker_cpu: Optional[float]


def children_cpu() -> float:
    """CPU seconds of every child process this process has waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_measured(cmd: Sequence[str], timeout: float, broker_pid: Optional[int] = None,
                 cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None) -> Run:
    """Run ``cmd`` to its end in its own session; CPU of its tree from RUSAGE_CHILDREN.

    Nothing else of ours may end in between (the throwaway broker is waited for only at the end),
    so the difference is this tool's. On a time-out the whole session is killed."""
    cpu0, bcpu0, t0 = children_cpu(), proc_cpu(broker_pid), time.monotonic()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=env, start_new_session=True, text=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += "\n[loadtools: killed after %.0f s]" % timeout
    wall = time.monotonic() - t0
    bcpu1 = proc_cpu(broker_pid)
    return Run(list(cmd), proc.returncode, out, err, wall, children_cpu() - cpu0,
               None if bcpu0 is None or bcpu1 is None else bcpu1 - bcpu0)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(preferred: int) -> int:
    """``preferred`` when nothing listens there and it can be bound, else any free loopback port."""
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise Unavailable("no free loopback port")


def say(msg: str) -> None:
    print("loadtools: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Fetching the tools into the cache


def need(program: str, why: str) -> str:
    path = shutil.which(program)
    if not path:
        raise Unavailable("%s is not on PATH (%s)" % (program, why))
    return path


def maven_versions(group: str, artifact: str) -> List[str]:
    """Versions Maven Central lists for group:artifact, newest first ([] when unreachable)."""
    url = "%s/%s/%s/maven-metadata.xml" % (MAVEN_CENTRAL, group.replace(".", "/"), artifact)
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            return parse_maven_versions(resp.read().decode("utf-8"))
    except (OSError, ET.ParseError) as e:
        say("could not read %s (%s)" % (url, e))
        return []


def mvn_copy_dependencies(group: str, artifact: str, version: str, dest: Path) -> Optional[str]:
    """Resolve group:artifact:version and its runtime dependencies into dest/lib with Maven,
    through a throwaway pom.xml. None when it worked, else the tail of Maven's output."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.stompfast.loadtools</groupId><artifactId>fetch</artifactId><version>1</version>"
        "<dependencies><dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version>"
        "</dependency></dependencies></project>\n" % (group, artifact, version))
    p = subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", "-DoutputDirectory=lib",
                        "-DincludeScope=runtime"], cwd=dest, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=600)
    if p.returncode == 0 and (dest / "lib" / ("%s-%s.jar" % (artifact, version))).exists():
        return None
    return (p.stdout + p.stderr)[-1500:]


def fetch_perftest(cache: Path, pinned: Optional[str]) -> Tuple[str, Path]:
    """PerfTest's classpath folder: the newest version (or ``pinned``) that Maven resolves."""
    need("java", "PerfTest is a Java program")
    candidates = [pinned] if pinned else maven_versions("com.rabbitmq", "perf-test")
    candidates = candidates or list(PERFTEST_FALLBACK_VERSIONS)
    for version in candidates:
        dest = cache / ("perf-test-" + version)
        if (dest / "lib" / ("perf-test-%s.jar" % version)).exists():
            return version, dest / "lib"
    need("mvn", "to fetch com.rabbitmq:perf-test and its dependencies from Maven Central")
    reasons = []
    for version in candidates[:3]:
        dest = cache / ("perf-test-" + version)
        say("fetching com.rabbitmq:perf-test:%s with Maven into %s" % (version, dest))
        failure = mvn_copy_dependencies("com.rabbitmq", "perf-test", version, dest)
        if failure is None:
            return version, dest / "lib"
        reasons.append("%s: %s" % (version, failure.strip().splitlines()[-1] if failure.strip() else "failed"))
    raise Unavailable("could not fetch PerfTest (%s)" % "; ".join(reasons))


def find_artemis(cache: Path, home: Optional[str]) -> Path:
    """bin/artemis: ``--artemis-home``, else the distribution scripts/brokers.sh unpacked, else one
    fetched with Maven (org.apache.activemq:apache-artemis:VERSION:tar.gz:bin) into the cache."""
    need("java", "Artemis is a Java program")
    if home:
        exe = Path(home) / "bin" / "artemis"
        if not exe.is_file():
            raise Unavailable("no bin/artemis under --artemis-home %s" % home)
        return exe
    found = sorted((REPO / ".brokers" / "artemis" / "dist").glob("apache-artemis-*/bin/artemis"))
    found += sorted(cache.glob("apache-artemis-*/bin/artemis"))
    if found:
        return found[-1]
    need("mvn", "to fetch the Artemis distribution from Maven Central")
    version = ARTEMIS_FETCH_VERSION
    say("fetching org.apache.activemq:apache-artemis:%s:tar.gz:bin with Maven" % version)
    p = subprocess.run(["mvn", "-q", "-B", "dependency:copy",
                        "-Dartifact=org.apache.activemq:apache-artemis:%s:tar.gz:bin" % version,
                        "-DoutputDirectory=%s" % cache], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=900)
    tgz = cache / ("apache-artemis-%s-bin.tar.gz" % version)
    if p.returncode != 0 or not tgz.exists():
        raise Unavailable("could not fetch Artemis %s: %s" % (version, (p.stdout + p.stderr)[-300:].strip()))
    with tarfile.open(tgz) as tf:
        try:
            tf.extractall(cache, filter="data")
        except TypeError:  # a Python without extraction filters
            tf.extractall(cache)
    exe = cache / ("apache-artemis-%s" % version) / "bin" / "artemis"
    if not exe.is_file():
        raise Unavailable("%s did not unpack to bin/artemis" % tgz)
    return exe


def fetch_omq(cache: Path) -> Path:
    """The omq binary, ``go install``ed into the cache (GOBIN) through the Go module proxy."""
    gobin = cache / "gobin"
    exe = gobin / "omq"
    if exe.is_file():
        return exe
    need("go", "omq is a Go program")
    say("go install %s" % OMQ_MODULE)
    env = dict(os.environ, GOBIN=str(gobin))
    try:
        p = subprocess.run(["go", "install", OMQ_MODULE], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=600)
    except subprocess.TimeoutExpired:
        raise Unavailable("go install %s timed out" % OMQ_MODULE) from None
    if p.returncode != 0 or not exe.is_file():
        lines = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if ln.strip()]
        raise Unavailable("go install %s failed: %s" % (OMQ_MODULE, " / ".join(lines[-2:]) or "rc %d" % p.returncode))
    return exe


# ---------------------------------------------------------------------------------------------
# The throwaway Artemis instance


@dataclass
class ArtemisInstance:
    """An Artemis instance of ours: created, started, stopped by this script."""
    exe: Path
    path: Path
    port: int
    proc: "Optional[subprocess.Popen[bytes]]" = None
    log_path: Optional[Path] = None

    def create(self) -> None:
        """``artemis create`` (login required, guest/guest, no web console, only the main
        acceptor), then that acceptor narrowed to CORE and STOMP on 127.0.0.1:port."""
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        p = subprocess.run([str(self.exe), "create", "--silent", "--force", "--name", "loadtools",
                            "--host", "127.0.0.1", "--default-port", str(self.port), "--user", "guest",
                            "--password", "guest", "--require-login", "--role", "amq", "--no-web",
                            "--no-amqp-acceptor", "--no-hornetq-acceptor", "--no-mqtt-acceptor",
                            "--no-stomp-acceptor", "--no-autotune", "--nio", str(self.path)],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if p.returncode != 0:
            raise Unavailable("artemis create failed: %s" % (p.stdout + p.stderr)[-300:].strip())
        xml_path = self.path / "etc" / "broker.xml"
        xml, n = re.subn(r"protocols=[A-Z,]+", "protocols=CORE,STOMP", xml_path.read_text())
        if n != 1:
            raise Unavailable("%s: expected one acceptor with protocols=, found %d" % (xml_path, n))
        xml_path.write_text(xml)

    def start(self, timeout: float = 90.0) -> str:
        """Start it (its own session, log in the instance folder); the broker's version when it is up."""
        self.log_path = self.path / "loadtools-run.log"
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(self.path / "bin" / "artemis"), "run"], cwd=self.path, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if "Server is now active" in text and port_open("127.0.0.1", self.port):
                return parse_artemis_broker_version(text) or "?"
            if self.proc.poll() is not None:
                raise Unavailable("the Artemis instance exited at start: %s" % text[-400:])
            time.sleep(0.5)
        self.stop()
        raise Unavailable("the Artemis instance was not up after %.0f s" % timeout)

    def pid(self) -> Optional[int]:
        return listener_pid(self.port)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to its session, SIGKILL after ``timeout``; then it is waited for."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


# ---------------------------------------------------------------------------------------------
# Commands


def stompfast_cmd(url: str, size: int, duration: float, warmup: float, rate: Optional[int]) -> List[str]:
    cmd = [sys.executable, "-m", "stompfast", "bench", "--url", url, "-p", "1", "-c", "1", "--size", str(size),
           "--duration", "%g" % duration, "--json", "-q"]
    if warmup:
        cmd += ["--warmup", "%gs" % warmup]
    if rate:
        cmd += ["--rate", str(rate)]
    return cmd


def perftest_cmd(lib: Path, uri: str, queue: str, size: int, duration: float, rate: Optional[int]) -> List[str]:
    """1 producer, 1 consumer, auto-ack (as stompfast bench's default), non-persistent (PerfTest's
    default), an auto-delete queue of this run's name."""
    cmd = ["java", "-cp", str(lib) + "/*", "com.rabbitmq.perf.PerfTest", "-h", uri, "-x", "1", "-y", "1",
           "-s", str(size), "-z", str(int(round(duration))), "-a", "-u", queue, "-ad", "true"]
    if rate:
        cmd += ["-r", str(rate)]
    return cmd


def artemis_perf_cmd(exe: Path, port: int, queue: str, size: int, duration: float, warmup: float,
                     rate: Optional[int]) -> List[str]:
    """``artemis perf client`` tuned as its documentation does for throughput (--max-pending 100,
    confirmationWindowSize on the producer URL); non-persistent (its default), auto-ack."""
    cmd = [str(exe), "perf", "client", "--url", "tcp://127.0.0.1:%d?confirmationWindowSize=20000" % port,
           "--consumer-url", "tcp://127.0.0.1:%d" % port, "--user", "guest", "--password", "guest",
           "--message-size", str(size), "--duration", str(int(round(duration))),
           "--warmup", str(int(round(warmup))), "--max-pending", "100", "queue://" + queue]
    if rate:
        cmd += ["--rate", str(rate)]
    return cmd


# ---------------------------------------------------------------------------------------------
# Pairs


@dataclass
class Measure:
    """One tool in one scenario: the figures, or why there are none."""
    tool: str
    scenario: str  # "max" or "rate:N"
    figures: Dict[str, Any] = field(default_factory=dict)
    cpu: Optional[float] = None
    wall: Optional[float] = None
    broker_cpu: Optional[float] = None
    error: Optional[str] = None

    def cpu_us_per_msg(self) -> Optional[float]:
        n = self.figures.get("received")
        return self.cpu / n * 1e6 if self.cpu is not None and n else None

    def broker_us_per_msg(self) -> Optional[float]:
        n = self.figures.get("received")
        return self.broker_cpu / n * 1e6 if self.broker_cpu is not None and n else None

    def as_dict(self) -> Dict[str, Any]:
        return {"tool": self.tool, "scenario": self.scenario, "figures": self.figures, "cpu_s": self.cpu,
                "wall_s": self.wall, "broker_cpu_s": self.broker_cpu, "cpu_us_per_msg": self.cpu_us_per_msg(),
                "broker_cpu_us_per_msg": self.broker_us_per_msg(), "error": self.error}


@dataclass
class PairResult:
    name: str
    peer: str
    peer_version: Optional[str] = None
    broker: Optional[str] = None
    stompfast_url: Optional[str] = None
    measures: List[Measure] = field(default_factory=list)
    skipped: Optional[str] = None
    notes: List[str] = field(default_factory=list)

    def get(self, tool: str, scenario: str) -> Optional[Measure]:
        return next((m for m in self.measures if m.tool == tool and m.scenario == scenario), None)

    def as_dict(self) -> Dict[str, Any]:
        return {"pair": self.name, "peer": self.peer, "peer_version": self.peer_version, "broker": self.broker,
                "stompfast_url": self.stompfast_url, "skipped": self.skipped, "notes": self.notes,
                "measures": [m.as_dict() for m in self.measures]}


class Keeper:
    """Writes each tool's raw output to runs/<time>/ (when kept)."""

    def __init__(self, folder: Optional[Path]) -> None:
        self.folder = folder
        if folder:
            folder.mkdir(parents=True, exist_ok=True)

    def keep(self, name: str, run: Run) -> None:
        if self.folder:
            (self.folder / (name + ".out")).write_text("$ %s\n# rc %d, %.1f s, %.2f CPU s\n%s\n--- stderr\n%s" % (
                " ".join(run.cmd), run.rc, run.wall, run.cpu, run.stdout, run.stderr))


def measure(tool: str, scenario: str, run: Run, figures_of: Callable[[Run], Dict[str, Any]], keeper: Keeper,
            tag: str) -> Measure:
    """A Measure from a finished run, ``figures_of(run)`` giving the figures (errors caught)."""
    keeper.keep("%s-%s-%s" % (tag, tool, scenario.replace(":", "")), run)
    m = Measure(tool, scenario, cpu=run.cpu, wall=run.wall, broker_cpu=run.broker_cpu)
    try:
        m.figures = figures_of(run)
    except (ValueError, KeyError, TypeError) as e:
        m.error = "could not read its output (%s); rc %d: %s" % (e, run.rc, (run.stderr or run.stdout)[-200:].strip())
        return m
    if run.rc != 0 and m.figures.get("receive_rate") is None:
        m.error = "rc %d: %s" % (run.rc, (run.stderr or run.stdout)[-300:].strip())
    return m


def scenarios(rates: Sequence[int]) -> List[Tuple[str, Optional[int]]]:
    return [("max", None)] + [("rate:%d" % r, r) for r in rates]


def run_stompfast(url: str, args: argparse.Namespace, scenario: str, rate: Optional[int],
                  broker_pid: Optional[int], keeper: Keeper, tag: str) -> Measure:
    say("%s: stompfast bench %s" % (tag, scenario))
    run = run_measured(stompfast_cmd(url, args.size, args.duration, args.warmup, rate),
                       args.duration + 90, broker_pid, cwd=REPO)
    return measure("stompfast", scenario, run,
                   lambda r: parse_stompfast_json(r.stdout, args.warmup, args.duration), keeper, tag)


def pair_perftest(args: argparse.Namespace, keeper: Keeper) -> PairResult:
    """PerfTest over AMQP 0.9.1 on RabbitMQ, beside stompfast bench on the same node's STOMP port."""
    res = PairResult("perftest", "PerfTest")
    host, amqp_port, stomp_port = "127.0.0.1", args.amqp_port, args.rabbitmq_stomp_port
    res.stompfast_url = "stomp://guest:guest@%s:%d/" % (host, stomp_port)
    for port in (amqp_port, stomp_port):
        if not port_open(host, port):
            raise Unavailable("nothing listens on %s:%d (RabbitMQ down? bash scripts/brokers.sh start rabbitmq)"
                              % (host, port))
    version, lib = fetch_perftest(args.cache, args.perftest_version)
    res.peer_version = "PerfTest %s" % version
    broker_pid = listener_pid(amqp_port)
    if broker_pid != listener_pid(stomp_port):
        res.notes.append("AMQP and STOMP ports are served by different processes: broker CPU not compared")
        broker_pid = None
    uri = "amqp://guest:guest@%s:%d" % (host, amqp_port)
    for scenario, rate in scenarios(args.rates):
        queue = "loadtools-perftest-" + uuid.uuid4().hex[:10]
        say("perftest: PerfTest %s" % scenario)
        run = run_measured(perftest_cmd(lib, uri, queue, args.size, args.duration, rate), args.duration + 90,
                           broker_pid)
        m = measure("peer", scenario, run, lambda r: perftest_figures(r.stdout, args.warmup, args.duration),
                    keeper, "perftest")
        if m.figures.get("version"):
            res.peer_version = "PerfTest %s" % m.figures["version"]
        res.measures.append(m)
        s = run_stompfast(res.stompfast_url, args, scenario, rate, broker_pid, keeper, "perftest")
        res.broker = res.broker or s.figures.get("server")
        res.measures.append(s)
    return res


def pair_artemis(args: argparse.Namespace, keeper: Keeper) -> PairResult:
    """``artemis perf client`` (CORE) and stompfast bench (STOMP) on a throwaway Artemis instance."""
    res = PairResult("artemis", "artemis perf")
    exe = find_artemis(args.cache, args.artemis_home)
    port = free_port(args.artemis_port)
    inst = ArtemisInstance(exe, args.cache / "artemis-instance", port)
    say("artemis: creating and starting a throwaway instance on 127.0.0.1:%d (%s)" % (port, inst.path))
    inst.create()
    try:
        version = inst.start()
        res.broker = "ActiveMQ Artemis %s (throwaway instance, CORE+STOMP on 127.0.0.1:%d)" % (version, port)
        res.peer_version = "artemis perf client %s" % version
        res.stompfast_url = "stomp://guest:guest@127.0.0.1:%d/" % port
        broker_pid = inst.pid()
        warm_up_broker(exe, port, args)
        for scenario, rate in scenarios(args.rates):
            queue = "loadtools-artemis-" + uuid.uuid4().hex[:10]
            say("artemis: artemis perf client %s" % scenario)
            run = run_measured(artemis_perf_cmd(exe, port, queue, args.size, args.duration, args.warmup, rate),
                               args.duration + 120, broker_pid, cwd=args.cache)
            res.measures.append(measure("peer", scenario, run,
                                        lambda r: artemis_figures(r.stdout, args.warmup, args.duration),
                                        keeper, "artemis"))
            res.measures.append(run_stompfast(res.stompfast_url, args, scenario, rate, broker_pid, keeper, "artemis"))
    finally:
        say("artemis: stopping the throwaway instance")
        inst.stop()
    return res


def warm_up_broker(exe: Path, port: int, args: argparse.Namespace) -> None:
    """A freshly started Artemis runs interpreted at first: one unmeasured run of each tool
    (``--broker-warmup`` seconds, max-throughput mode) so that neither meets a cold broker."""
    if args.broker_warmup <= 0:
        return
    say("artemis: warming the broker up (%g s of each tool, not measured)" % args.broker_warmup)
    d = args.broker_warmup
    for cmd in (artemis_perf_cmd(exe, port, "loadtools-warmup", args.size, d, 0, None),
                stompfast_cmd("stomp://guest:guest@127.0.0.1:%d/" % port, args.size, d, 0, None)):
        run_measured(cmd, d + 90, cwd=args.cache)


def pair_omq(args: argparse.Namespace, keeper: Keeper) -> PairResult:
    """omq stomp-stomp on RabbitMQ's STOMP port, beside stompfast bench on the same port."""
    fetch_omq(args.cache)  # raises Unavailable with the reason when it cannot be had
    raise Unavailable("omq was installed, but its output is not parsed by this version of the script")


PAIR_FUNCS = {"perftest": pair_perftest, "artemis": pair_artemis, "omq": pair_omq}
PEER_NAMES = {"perftest": "PerfTest", "artemis": "artemis perf", "omq": "omq"}


# ---------------------------------------------------------------------------------------------
# The table


def fmt(v: Optional[float], digits: int = 0) -> str:
    if v is None:
        return "n/a"
    return "{:,.{d}f}".format(v, d=digits)


def fmt_ms(us: Optional[float]) -> str:
    if us is None:
        return "n/a"
    return "%.2f ms" % (us / 1000.0) if us < 100_000 else "{:,.0f} ms".format(us / 1000.0)


def ratio(sf: Optional[float], peer: Optional[float]) -> str:
    if sf is None or peer is None or peer == 0:
        return "n/a"
    return "%.2fx" % (sf / peer)


def figure_rows(pair: PairResult, rates: Sequence[int]) -> List[List[str]]:
    """The rows of one pair: figure, peer, stompfast, stompfast/peer."""
    rows: List[List[str]] = []

    def add(figure: str, p: Optional[float], s: Optional[float], show: Callable[[Optional[float]], str]) -> None:
        rows.append([pair.name, figure, show(p), show(s), ratio(s, p)])

    peer, sf = pair.get("peer", "max"), pair.get("stompfast", "max")
    if peer and sf:
        add("max rate, received msgs/s while sending", peer.figures.get("receive_rate"),
            sf.figures.get("receive_rate"), fmt)
        add("tool CPU µs / received msg", peer.cpu_us_per_msg(), sf.cpu_us_per_msg(), lambda v: fmt(v, 1))
        add("broker CPU µs / received msg", peer.broker_us_per_msg(), sf.broker_us_per_msg(), lambda v: fmt(v, 1))
    for r in rates:
        peer, sf = pair.get("peer", "rate:%d" % r), pair.get("stompfast", "rate:%d" % r)
        if not (peer and sf):
            continue
        pl, sl = peer.figures.get("latency_us") or {}, sf.figures.get("latency_us") or {}
        add("@%s/s received msgs/s" % fmt(r), peer.figures.get("receive_rate"), sf.figures.get("receive_rate"), fmt)
        for k in ("p50", "p99", "max"):
            add("@%s/s latency %s" % (fmt(r), k), pl.get(k), sl.get(k), fmt_ms)
    for m in pair.measures:
        if m.error:
            rows.append([pair.name, "%s %s FAILED" % (m.tool, m.scenario), m.error[:100], "", ""])
    return rows


def pair_notes(pair: PairResult, rates: Sequence[int]) -> List[str]:
    notes = list(pair.notes)
    peer, sf = pair.get("peer", "max"), pair.get("stompfast", "max")
    if peer and sf:
        own = peer.figures.get("own_rate")
        peer_own = ("%s 'receiving rate avg' %s msgs/s" % (pair.peer, fmt(own)) if own is not None
                    else "%s prints no rate in its summary" % pair.peer)
        notes.append("max rate, the tools' own summary figures: %s; stompfast receive_msgs_per_s %s (measured "
                     "messages from the first to the last received: the drain after the producer stopped "
                     "included)" % (peer_own, fmt(sf.figures.get("own_rate"))))
    for r in rates:
        peer, sf = pair.get("peer", "rate:%d" % r), pair.get("stompfast", "rate:%d" % r)
        if peer and peer.figures.get("send_delay_us"):
            d = peer.figures["send_delay_us"]
            notes.append("@%s/s artemis perf 'delay send time' (actual - intended send): p50 %s, p99 %s, max %s"
                         % (fmt(r), fmt_ms(d.get("p50")), fmt_ms(d.get("p99")), fmt_ms(d.get("max"))))
        if sf and sf.figures.get("send_lag_us"):
            d = sf.figures["send_lag_us"]
            notes.append("@%s/s stompfast send_lag_us (actual - intended send): p50 %s, p99 %s, max %s"
                         % (fmt(r), fmt_ms(d.get("p50")), fmt_ms(d.get("p99")), fmt_ms(d.get("max"))))
    return notes


def print_report(pairs: List[PairResult], args: argparse.Namespace, elapsed: float) -> None:
    print("loadtools: %s profile, %d-byte bodies, %g s per run (first %g s warm-up), 1 producer, 1 consumer, "
          "fixed rates %s msgs/s; ratio = stompfast / peer" % (
              args.profile, args.size, args.duration, args.warmup, ", ".join(fmt(r) for r in args.rates)))
    rows: List[List[str]] = []
    for pair in pairs:
        if pair.skipped:
            print("  %s: skipped: %s" % (pair.name, pair.skipped))
            continue
        print("  %s: %s vs stompfast bench (%s) on %s" % (pair.name, pair.peer_version, pair.stompfast_url,
                                                          pair.broker))
        rows += figure_rows(pair, args.rates)
    if rows:
        print()
        print_table(["pair", "figure", "peer", "stompfast", "sf/peer"], rows, args.markdown)
    print()
    print("latency, as each tool measures it:")
    for name in [p.name for p in pairs if not p.skipped] + ["stompfast"]:
        print("  - " + LATENCY_MEANING[name])
    for pair in pairs:
        for note in pair_notes(pair, args.rates):
            print("  %s: %s" % (pair.name, note))
    print("CPU: user+sys of the tool's process tree (getrusage RUSAGE_CHILDREN), JVM/Python start-up and drain "
          "included, / every message received; broker CPU from /proc over the same run.")
    print("took %.0f s" % elapsed)


# ---------------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 s runs, 1 s warm-up: about 2 minutes")
    p.add_argument("--pairs", default=",".join(ALL_PAIRS), help="comma-separated from %s" % ",".join(ALL_PAIRS))
    p.add_argument("--size", type=int, default=100, help="body bytes (default 100; PerfTest's minimum is 12)")
    p.add_argument("--rates", default="1000,5000", help="fixed rates for the latency runs, msgs/s (default 1000,5000)")
    p.add_argument("--duration", type=float, help="seconds per run (default 20, --quick 5)")
    p.add_argument("--warmup", type=float, help="seconds left out at the start of each run (default 5, --quick 1)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    p.add_argument("--markdown", action="store_true", help="the table as Markdown")
    p.add_argument("--cache", type=Path, default=REPO / ".bench-cache",
                   help="where tools are fetched to (default .bench-cache/ in the repository)")
    p.add_argument("--no-keep", dest="keep", action="store_false", help="do not keep the tools' raw output")
    p.add_argument("--perftest-version", help="a PerfTest version (default: the newest that Maven resolves)")
    p.add_argument("--artemis-home", help="an Artemis distribution (default: the one under .brokers/, else fetched)")
    p.add_argument("--artemis-port", type=int, default=61720, help="the throwaway instance's port (default 61720, "
                   "another free one when taken)")
    p.add_argument("--broker-warmup", type=float, help="seconds of each tool, not measured, on the freshly started "
                   "Artemis instance before its measurements (default 10, --quick 3; 0: none)")
    p.add_argument("--amqp-port", type=int, default=5672, help="RabbitMQ's AMQP port (default 5672)")
    p.add_argument("--rabbitmq-stomp-port", type=int, default=61613, help="RabbitMQ's STOMP port (default 61613)")
    args = p.parse_args(argv)
    args.profile = "quick" if args.quick else "default"
    duration, warmup = PROFILES[args.profile]
    args.duration = args.duration if args.duration is not None else duration
    args.warmup = args.warmup if args.warmup is not None else warmup
    if args.broker_warmup is None:
        args.broker_warmup = 3.0 if args.quick else 10.0
    if args.warmup >= args.duration:
        p.error("--warmup must be shorter than --duration")
    args.rates = [int(r) for r in args.rates.split(",") if r.strip()]
    args.pairs = [x.strip() for x in args.pairs.split(",") if x.strip()]
    bad = [x for x in args.pairs if x not in ALL_PAIRS]
    if bad:
        p.error("unknown pair(s) %s; choose from %s" % (",".join(bad), ",".join(ALL_PAIRS)))
    if args.size < 12:
        p.error("--size must be at least 12 (PerfTest's timestamp)")
    args.cache = args.cache.resolve() / "loadtools"
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    args.cache.mkdir(parents=True, exist_ok=True)
    keeper = Keeper(args.cache / "runs" / time.strftime("%Y%m%d-%H%M%S") if args.keep else None)
    pairs: List[PairResult] = []
    for name in args.pairs:
        try:
            pairs.append(PAIR_FUNCS[name](args, keeper))
        except Unavailable as e:
            say("%s: skipped: %s" % (name, e))
            pairs.append(PairResult(name, PEER_NAMES[name], skipped=str(e)))
    elapsed = time.monotonic() - t0
    if args.json:
        json.dump({"schema": "stompfast.loadtools/1", "profile": args.profile, "size": args.size,
                   "duration_s": args.duration, "warmup_s": args.warmup, "rates": args.rates,
                   "elapsed_s": round(elapsed, 1), "latency_meaning": LATENCY_MEANING,
                   "pairs": [p.as_dict() for p in pairs]}, sys.stdout, indent=1)
        print()
    else:
        print_report(pairs, args, elapsed)
    if keeper.folder:
        say("raw outputs in %s" % keeper.folder)
    failed = any(m.error for p in pairs for m in p.measures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
