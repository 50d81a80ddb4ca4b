"""scripts/brokers.sh against a STOMP server it did not start, on non-default ports only.

A tiny loopback server answers CONNECTED on one of the two ActiveMQ ports given to the
script (STOMPFAST_ACTIVEMQ_PORT / STOMPFAST_ACTIVEMQ_NIO_PORT, both free ports, never the
defaults), nothing listens on the other: `start activemq` must refuse it and `status
activemq` must call it NOT READY, with the same explanation. The brokers already running
on the default ports are not touched (their ports are never named; the brokers directory
is a temporary one, so no instance of this checkout is looked at either).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest
from brokerenv import BROKERS, broker_url
from hostile import Conn, HostileServer

pytestmark = [pytest.mark.timeout(120)]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "brokers.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers_connected(conn: Conn) -> None:
    conn.connected()
    conn.sock.settimeout(10)
    while conn.sock.recv(65536):
        pass


@pytest.fixture(params=["stomp", "stomp+nio"])
def half_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tuple[int, int, Dict[str, str]]]:
    """(the port that answers STOMP, the one nothing listens on, the script's environment)."""
    if not os.path.exists("/usr/share/activemq/bin/activemq.jar"):
        pytest.skip("the activemq package is not installed: `start` would install it")
    with HostileServer(answers_connected) as server:
        answering, silent = server.port, free_port()
        ports = (answering, silent) if request.param == "stomp" else (silent, answering)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
        env.update(STOMPFAST_ACTIVEMQ_PORT=str(ports[0]), STOMPFAST_ACTIVEMQ_NIO_PORT=str(ports[1]),
                   STOMPFAST_BROKERS_DIR=str(tmp_path / "brokers"), STOMPFAST_BROKERS_TIMEOUT="5")
        try:
            yield answering, silent, env
        finally:
            # Only if the script started an ActiveMQ after all (a regression): stop that one, by its pid.
            pidfile = tmp_path / "brokers" / "activemq" / "activemq.pid"
            if pidfile.exists():
                try:
                    os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
                except (ValueError, ProcessLookupError):
                    pass


def script(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60)


def test_start_and_status_agree_on_a_broker_that_answers_on_one_port_only(half_broker) -> None:
    answering, silent, env = half_broker
    why = (f"something not started by this script answers STOMP on 127.0.0.1:{answering}"
           f" but not on 127.0.0.1:{silent} (TCP connect failed")
    start = script(env, "start", "activemq")
    assert start.returncode == 1, start
    assert why in start.stderr and "half a broker is not reused" in start.stderr, start.stderr
    status = script(env, "status", "activemq")
    assert status.returncode == 3, status
    main = env["STOMPFAST_ACTIVEMQ_PORT"]
    assert status.stdout.startswith(f"activemq NOT READY  stomp://guest:guest@127.0.0.1:{main}/: {why}"), status.stdout
    assert "ready " not in status.stdout.replace("NOT READY", "")
    assert not (Path(env["STOMPFAST_BROKERS_DIR"]) / "activemq" / "activemq.pid").exists()


def test_status_of_a_broker_on_both_ports_is_ready(tmp_path: Path) -> None:
    with HostileServer(answers_connected) as one, HostileServer(answers_connected) as two:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
        env.update(STOMPFAST_ACTIVEMQ_PORT=str(one.port), STOMPFAST_ACTIVEMQ_NIO_PORT=str(two.port),
                   STOMPFAST_BROKERS_DIR=str(tmp_path / "brokers"))
        status = script(env, "status", "activemq")
    assert status.returncode == 0, status
    assert status.stdout.startswith(f"activemq ready      stomp://guest:guest@127.0.0.1:{one.port}/"), status.stdout
    assert f"(stomp+nio ready stomp://guest:guest@127.0.0.1:{two.port}/)" in status.stdout


def script_env(tmp_path: Path) -> Dict[str, str]:
    """No STOMPFAST_ settings from the caller, a private brokers directory, free Artemis ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env.update(STOMPFAST_ARTEMIS_PORT=str(free_port()), STOMPFAST_ARTEMIS_PREFIX_PORT=str(free_port()),
               STOMPFAST_BROKERS_DIR=str(tmp_path / "brokers"))
    return env


def test_status_artemis_names_only_artemis_and_exits_3_when_nothing_answers(tmp_path: Path) -> None:
    env = script_env(tmp_path)
    status = script(env, "status", "artemis")
    assert status.returncode == 3, status
    lines = status.stdout.splitlines()
    assert len(lines) == 1, status.stdout
    port = env["STOMPFAST_ARTEMIS_PORT"]
    assert lines[0].startswith(f"artemis NOT READY   stomp://guest:guest@127.0.0.1:{port}/: TCP connect failed"), lines
    assert lines[0].endswith("[not started by this script]"), lines


def test_status_of_an_artemis_on_both_ports_is_ready_and_names_the_websocket_url(tmp_path: Path) -> None:
    with HostileServer(answers_connected) as one, HostileServer(answers_connected) as two:
        env = script_env(tmp_path)
        env.update(STOMPFAST_ARTEMIS_PORT=str(one.port), STOMPFAST_ARTEMIS_PREFIX_PORT=str(two.port))
        status = script(env, "status", "artemis")
    # The stand-in answers STOMP, not a WebSocket upgrade: ready on both ports, websocket not.
    assert status.returncode == 3, status
    assert status.stdout.startswith(f"artemis ready       stomp://guest:guest@127.0.0.1:{one.port}/"), status.stdout
    assert f"(prefixed ready stomp://guest:guest@127.0.0.1:{two.port}/)" in status.stdout
    assert "(websocket NOT READY: " in status.stdout


def test_env_prints_the_artemis_urls_from_the_port_settings(tmp_path: Path) -> None:
    env = script_env(tmp_path)
    out = script(env, "env").stdout
    port, prefix = env["STOMPFAST_ARTEMIS_PORT"], env["STOMPFAST_ARTEMIS_PREFIX_PORT"]
    assert f"export STOMPFAST_ARTEMIS_URL=stomp://guest:guest@127.0.0.1:{port}/\n" in out
    assert f"export STOMPFAST_ARTEMIS_PREFIX_URL=stomp://guest:guest@127.0.0.1:{prefix}/\n" in out
    assert f"export STOMPFAST_ARTEMIS_WS_URL=ws://guest:guest@127.0.0.1:{port}/\n" in out


@pytest.mark.parametrize("command", ["start", "stop", "restart", "status", "logs"])
def test_an_unknown_broker_name_is_refused_before_anything_runs(tmp_path: Path, command: str) -> None:
    env = script_env(tmp_path)
    done = script(env, command, "artemiss")
    assert done.returncode == 1, done
    assert "unknown broker 'artemiss' (rabbitmq, rabbitmq4, activemq, artemis or all)" in done.stderr
    assert done.stdout == ""
    assert not (tmp_path / "brokers").exists()


def test_a_malformed_artemis_version_is_refused(tmp_path: Path) -> None:
    env = script_env(tmp_path)
    env["STOMPFAST_ARTEMIS_VERSION"] = "2.40.0; rm -rf /"
    done = script(env, "status", "artemis")
    assert done.returncode == 1 and "STOMPFAST_ARTEMIS_VERSION must look like 2.40.0" in done.stderr, done


def exports(out: str) -> Dict[str, str]:
    """`export NAME=value` lines as a dict (every line must be one)."""
    env: Dict[str, str] = {}
    for line in out.splitlines():
        assert line.startswith("export ") and "=" in line, line
        name, _, value = line[len("export "):].partition("=")
        env[name] = value
    return env


def rabbitmq4_env(tmp_path: Path) -> Dict[str, str]:
    """No STOMPFAST_ settings from the caller, a private brokers directory (no chroot), free 4.x ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env.update(STOMPFAST_BROKERS_DIR=str(tmp_path / "brokers"), STOMPFAST_RABBITMQ4_PORT=str(free_port()),
               STOMPFAST_RABBITMQ4_WS_PORT=str(free_port()), STOMPFAST_RABBITMQ4_TLS_PORT=str(free_port()),
               STOMPFAST_RABBITMQ4_AMQP_PORT=str(free_port()))
    return env


def test_env_rabbitmq4_points_the_rabbitmq_variables_at_the_4x_node_and_brokerenv_agrees(tmp_path: Path) -> None:
    env = rabbitmq4_env(tmp_path)
    four = script(env, "env", "rabbitmq4")
    plain = script(env, "env")
    assert four.returncode == 0 and plain.returncode == 0, (four, plain)
    got, usual = exports(four.stdout), exports(plain.stdout)
    port, ws, tls = (env[f"STOMPFAST_RABBITMQ4_{k}PORT"] for k in ("", "WS_", "TLS_"))
    assert got["STOMPFAST_RABBITMQ_URL"] == f"stomp://guest:guest@127.0.0.1:{port}/"
    assert got["STOMPFAST_RABBITMQ_WS_URL"] == f"ws://guest:guest@127.0.0.1:{ws}/ws"
    assert got["STOMPFAST_RABBITMQ_TLS_URL"] == f"stomp+ssl://guest:guest@127.0.0.1:{tls}/"
    assert (got["STOMPFAST_RABBITMQ_PORT"], got["STOMPFAST_RABBITMQ_WS_PORT"], got["STOMPFAST_RABBITMQ_TLS_PORT"]) \
        == (port, ws, tls)
    assert got["STOMPFAST_RABBITMQ_AMQP_PORT"] == env["STOMPFAST_RABBITMQ4_AMQP_PORT"]
    assert got["STOMPFAST_RABBITMQ_NODE"] == "rabbitmq4" and usual["STOMPFAST_RABBITMQ_NODE"] == "rabbitmq"
    # tests/brokerenv.py reads the same variables: each URL agrees with its port variable
    for name in ("rabbitmq", "rabbitmq_ws", "rabbitmq_tls"):
        url_var = {"rabbitmq": "STOMPFAST_RABBITMQ_URL", "rabbitmq_ws": "STOMPFAST_RABBITMQ_WS_URL",
                   "rabbitmq_tls": "STOMPFAST_RABBITMQ_TLS_URL"}[name]
        assert broker_url(name, got) == got[url_var]
    # everything that is not about RabbitMQ is what plain `env` prints; plain `env` sets the same
    # RabbitMQ variables for the 3.10 node, so that evaluating it after `env rabbitmq4` switches back
    rabbit = {k for k in got if k.startswith("STOMPFAST_RABBITMQ_")}
    assert {k: v for k, v in got.items() if k not in rabbit} == {k: v for k, v in usual.items() if k not in rabbit}
    assert sorted(k for k in usual if k.startswith("STOMPFAST_RABBITMQ_")) == sorted(rabbit)
    assert usual["STOMPFAST_RABBITMQ_URL"] == "stomp://guest:guest@127.0.0.1:61613/"
    assert (usual["STOMPFAST_RABBITMQ_PORT"], usual["STOMPFAST_RABBITMQ_AMQP_PORT"]) == ("61613", "5672")
    for name in ("rabbitmq", "rabbitmq_ws", "rabbitmq_tls"):
        assert broker_url(name, usual) == usual[BROKERS[name][0]]


def test_after_eval_of_env_rabbitmq4_the_rabbitmq_port_variables_name_the_4x_node_only(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    env["STOMPFAST_BROKERS_DIR"] = str(tmp_path / "brokers")
    env.update(exports(script(dict(env, STOMPFAST_RABBITMQ4_PORT="7613"), "env", "rabbitmq4").stdout))
    assert env["STOMPFAST_RABBITMQ_PORT"] == "7613"
    # without STOMPFAST_RABBITMQ4_PORT now: the 4.x node is still on 7613, the 3.10 node on its default
    assert exports(script(env, "env", "rabbitmq4").stdout)["STOMPFAST_RABBITMQ_URL"] == "stomp://guest:guest@127.0.0.1:7613/"
    assert exports(script(env, "env").stdout)["STOMPFAST_RABBITMQ_URL"] == "stomp://guest:guest@127.0.0.1:61613/"


def test_status_rabbitmq4_without_a_chroot_is_not_ready(tmp_path: Path) -> None:
    env = rabbitmq4_env(tmp_path)
    status = script(env, "status", "rabbitmq4")
    assert status.returncode == 3, status
    assert status.stdout == (
        f"rabbitmq4 NOT READY  (not installed: no chroot at {tmp_path}/brokers/forky; run start rabbitmq4)\n"
    )


@pytest.mark.parametrize("node", ["rabbitmq", "rabbitmq4"])
@pytest.mark.parametrize("command", ["start", "restart"])
def test_a_port_given_to_both_rabbitmq_nodes_is_refused_before_any_rabbitmqctl(tmp_path: Path, command: str,
                                                                               node: str) -> None:
    # A STOMPFAST_RABBITMQ_PORT left over from `eval "$(brokers.sh env rabbitmq4)"` followed by plain
    # `env`: `start rabbitmq` would move the 3.10 node's listeners onto the 4.x node's port. Stand-ins
    # for the RabbitMQ commands come first on PATH, so a regression cannot reach a real node.
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("rabbitmqctl", "rabbitmq-server", "rabbitmq-plugins"):
        (fake / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >>{tmp_path}/called\nexit 69\n")
        (fake / name).chmod(0o755)
    env = rabbitmq4_env(tmp_path)
    env.update(STOMPFAST_RABBITMQ_PORT=env["STOMPFAST_RABBITMQ4_PORT"], STOMPFAST_FORKY_DIR=str(tmp_path / "no-chroot"),
               PATH=f"{fake}:{env['PATH']}")
    done = script(env, command, node)
    assert done.returncode == 1, done
    assert f"port {env['STOMPFAST_RABBITMQ4_PORT']} is given to both RabbitMQ 3.10" in done.stderr, done.stderr
    assert not (tmp_path / "called").exists()
    assert not (tmp_path / "no-chroot").exists()
