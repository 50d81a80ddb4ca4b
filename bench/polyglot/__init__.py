"""bench/compare.py's non-Python contenders: build them on first use, run one measurement.

Two small programs of ours, each using its library the way that library's docs teach:

* ``go-stomp``: ``go/main.go`` on github.com/go-stomp/stomp/v3 v3.1.3 (``go.mod``/``go.sum``
  pin it), built with ``go build`` (``-mod=readonly``: the committed go.sum is the whole
  truth) into ``bench/.build/go/gostomp``;
* ``stompjs``: ``node/main.js`` on @stomp/stompjs 7.5.0 over @stomp/tcp-wrapper 1.0.1 (plain
  TCP; ``package-lock.json`` pins both), installed with ``npm ci`` into ``bench/.build/node``.

``bench/.build`` is git-ignored (``STOMPFAST_BENCH_BUILD`` moves it). A build is redone only
when its sources or the tool changed (a stamp file holds their hash). ``go``, ``node`` and
``npm`` are looked up on PATH (``/usr/local/go/bin/go`` as a last resort for go);
``STOMPFAST_BENCH_GO``, ``STOMPFAST_BENCH_NODE`` and ``STOMPFAST_BENCH_NPM`` name others
(an empty value: not available). A missing tool or a failed build is returned as a reason,
which compare.py shows as n/a: it never stops a run.

One measurement (:func:`run`): the program reads the spec (JSON) on stdin, connects, and
prints ``START`` and ``STOP`` around its timed part, whose CPU it reads from its own
rusage and its wall time from a monotonic clock; then ``RESULT {json}``. At ``START``
and ``STOP`` this side reads the broker's and the machine's CPU, as ``client_compare.Window``
does around a Python worker's timed part.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import client_compare as cc

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
GO_STOMP_VERSION = "v3.1.3"
STOMPJS_VERSION = "7.5.0"
TCP_WRAPPER_VERSION = "1.0.1"
BUILD_TIMEOUT = 600.0
# name -> (tool it needs, its sources relative to HERE)
PROGRAMS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "go-stomp": ("go", ("go/main.go", "go/go.mod", "go/go.sum")),
    "stompjs": ("node", ("node/main.js", "node/package.json", "node/package-lock.json")),
}


def build_dir() -> Path:
    return Path(os.environ.get("STOMPFAST_BENCH_BUILD") or BENCH / ".build")


def tool(name: str) -> Optional[str]:
    """The path of ``go``, ``node`` or ``npm``, or None."""
    override = os.environ.get("STOMPFAST_BENCH_%s" % name.upper())
    if override is not None:
        return override if override and os.access(override, os.X_OK) else None
    found = shutil.which(name)
    if found is None and name == "go" and os.access("/usr/local/go/bin/go", os.X_OK):
        found = "/usr/local/go/bin/go"  # the official tarball's place, often not on PATH
    return found


def _tool_version(path: str, *args: str) -> str:
    try:
        r = subprocess.run([path, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "? (%s)" % exc
    return r.stdout.decode(errors="replace").strip()


def _stamp(name: str, tool_path: str, tool_version: str) -> str:
    h = hashlib.sha256()
    h.update(("%s\0%s\0%s\0" % (name, tool_path, tool_version)).encode())
    for rel in PROGRAMS[name][1]:
        h.update(rel.encode() + b"\0" + (HERE / rel).read_bytes() + b"\0")
    return h.hexdigest()


def _tail(output: bytes, lines: int = 6) -> str:
    return " / ".join(output.decode(errors="replace").strip().splitlines()[-lines:])


class _Lock:
    """An exclusive flock on the build folder (two runs building at once)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> "_Lock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(str(self.path), os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        os.close(self.fd)  # releases the lock


def _build_go(go: str, out: Path) -> Tuple[Optional[List[str]], Optional[str]]:
    binary = out / "gostomp"
    tmp = out / "gostomp.tmp"
    env = dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", GOTOOLCHAIN="local", CGO_ENABLED="0")
    try:
        r = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=str(HERE / "go"), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "go build failed: %s" % exc
    if r.returncode != 0:
        return None, "go build failed (exit %d): %s" % (r.returncode, _tail(r.stdout))
    os.replace(tmp, binary)
    return [str(binary)], None


def _build_node(node: str, out: Path) -> Tuple[Optional[List[str]], Optional[str]]:
    npm = tool("npm")
    if npm is None:
        return None, "npm not found (needed to install @stomp/stompjs %s)" % STOMPJS_VERSION
    for rel in PROGRAMS["stompjs"][1]:
        shutil.copyfile(HERE / rel, out / Path(rel).name)
    shutil.rmtree(out / "node_modules", ignore_errors=True)
    try:
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                           cwd=str(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "npm ci failed: %s" % exc
    if r.returncode != 0:
        return None, "npm ci failed (exit %d): %s" % (r.returncode, _tail(r.stdout))
    return [node, "--expose-gc", str(out / "main.js")], None


def _command(name: str, tool_path: str, out: Path) -> List[str]:
    if name == "go-stomp":
        return [str(out / "gostomp")]
    return [tool_path, "--expose-gc", str(out / "main.js")]


def ensure(name: str) -> Tuple[Optional[List[str]], Optional[str]]:
    """(command, None) once ``name`` is built (building it if needed), or (None, why not)."""
    need, _ = PROGRAMS[name]
    path = tool(need)
    if path is None:
        return None, "%s not found (install %s to measure %s)" % (need, "Go" if need == "go" else "Node.js", name)
    out = build_dir() / ("go" if name == "go-stomp" else "node")
    version = _tool_version(path, "version" if need == "go" else "--version")
    try:
        stamp = _stamp(name, path, version)
        with _Lock(build_dir() / (".lock-%s" % name)):
            out.mkdir(parents=True, exist_ok=True)
            stamp_file = out / "stamp"
            cmd = _command(name, path, out)
            ready = Path(cmd[-1]).exists() and (name != "stompjs" or (out / "node_modules/@stomp/stompjs").is_dir())
            if ready and stamp_file.exists() and stamp_file.read_text() == stamp:
                return cmd, None
            stamp_file.unlink(missing_ok=True)
            built, why = _build_go(path, out) if name == "go-stomp" else _build_node(path, out)
            if built is None:
                return None, why
            stamp_file.write_text(stamp)
            return built, None
    except OSError as exc:
        return None, "%s: build folder %s: %s" % (name, out, exc)


def versions(names: List[str]) -> Dict[str, str]:
    """What the run's JSON and header record about the non-Python contenders."""
    out: Dict[str, str] = {}
    if "go-stomp" in names:
        go = tool("go")
        out["go-stomp"] = "%s (%s)" % (GO_STOMP_VERSION, _tool_version(go, "version") if go else "go not found")
    if "stompjs" in names:
        node = tool("node")
        out["stompjs"] = "%s, @stomp/tcp-wrapper %s (node %s)" % (
            STOMPJS_VERSION, TCP_WRAPPER_VERSION, _tool_version(node, "--version") if node else "not found")
    return out


def run(name: str, program_spec: Dict[str, Any], timeout: float, broker_pid: Optional[int]) -> Dict[str, Any]:
    """Run the built program for one measurement; returns its RESULT with ``window`` filled in
    as client_compare.Window.result (the program's own wall and CPU, the broker's and the
    machine's CPU read here at its START and STOP). Raises cc.Failure on any failure."""
    cmd, why = ensure(name)
    if cmd is None:
        raise cc.Failure(why)
    marks: Dict[str, Tuple[Optional[float], Optional[float]]] = {}
    result: Optional[Dict[str, Any]] = None
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(program_spec).encode())
            proc.stdin.close()
            fd = proc.stdout.fileno()
            deadline = time.monotonic() + timeout
            pending = b""
            chunks: List[bytes] = []
            while result is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise cc.Failure("%s: no result within %.0f s" % (name, timeout))
                if not select.select([fd], [], [], left)[0]:
                    continue
                data = os.read(fd, 1 << 20)
                if not data:
                    break
                chunks.append(data)
                if b"\n" not in data:
                    continue
                pending = b"".join(chunks)
                lines = pending.split(b"\n")
                chunks = [lines.pop()]
                for line in lines:
                    if line in (b"START", b"STOP"):
                        marks[line.decode()] = (cc.proc_cpu(broker_pid), cc.machine_busy())
                    elif line.startswith(b"RESULT "):
                        result = json.loads(line[7:])
            if result is None:
                proc.wait(10)
                err.seek(0)
                raise cc.Failure("%s exited %s without a result: %s" % (name, proc.returncode, _tail(err.read())))
            try:
                proc.wait(10)  # it disconnects after the result
            except subprocess.TimeoutExpired:
                pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        if "error" in result:
            err.seek(0)
            tail = _tail(err.read(), 3)
            raise cc.Failure("%s%s" % (result["error"], " (stderr: %s)" % tail if tail else ""))
    if "START" not in marks or "STOP" not in marks:
        raise cc.Failure("%s: its timed part did not complete" % name)
    (b0, m0), (b1, m1) = marks["START"], marks["STOP"]
    result["window"] = {
        "wall": result.pop("wall"), "cpu_user": result.pop("cpu_user"), "cpu_sys": result.pop("cpu_sys"),
        "nvcsw": result.pop("nvcsw"), "nivcsw": result.pop("nivcsw"),
        "broker_cpu": None if b0 is None or b1 is None else b1 - b0,
        "machine_busy": None if m0 is None or m1 is None else m1 - m0,
    }
    return result


def expected_sha256(tag: bytes, n: int) -> str:
    """What the programs' ``bodies_sha256`` must be: the distinct bodies of make_bodies, sorted, joined."""
    return hashlib.sha256(b"".join(sorted(set(cc.make_bodies(tag, n))))).hexdigest()
