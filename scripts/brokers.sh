#!/usr/bin/env bash
# Real STOMP brokers on loopback for stompfast's integration tests (used by .ci/run and by hand).
#
# Usage:
#   scripts/brokers.sh start   [rabbitmq|activemq|artemis|all]  install what is missing, start, wait for STOMP
#   scripts/brokers.sh stop    [activemq|artemis|rabbitmq|all]  see "What stop does" below
#   scripts/brokers.sh restart [rabbitmq|activemq|artemis|all]  quick bounce (for tests that kill a broker mid-test)
#   scripts/brokers.sh status  [rabbitmq|activemq|artemis|all]  readiness of each broker; exit 0 only if all
#                                                               ready (3 otherwise)
#   scripts/brokers.sh clean   [rabbitmq|all]                   delete the queues test runs leave in RabbitMQ
#                                                               (names stompfast-test-*, -lg-*, -cli-*, ...)
#   scripts/brokers.sh env     [rabbitmq4]                      `export STOMPFAST_..._URL=...` lines, for eval
#   scripts/brokers.sh logs    [rabbitmq|activemq|artemis]      tail of the broker's log
#   scripts/brokers.sh rabbitmqctl rabbitmq|rabbitmq4 ARGS...   that node's rabbitmqctl (4.x: in its chroot)
# No broker name means all three (for stop: ActiveMQ and Artemis, see below). Every command also
# takes `rabbitmq4`, a second RabbitMQ (4.3.x) that is never part of `all` (see below).
#
#   eval "$(scripts/brokers.sh env)"   # then run the integration tests
#   eval "$(scripts/brokers.sh env rabbitmq4)"   # the same tests against the RabbitMQ 4 node
#
# Readiness means a STOMP CONNECT (accept-version:1.2, host:/, guest/guest) on the port is answered
# by a CONNECTED frame, not merely an open TCP port; ActiveMQ and Artemis are ready only when both
# their ports are. A broker this script did not start that answers on both ActiveMQ (or both
# Artemis) ports is reused; one that answers
# on only one of them is not: `start` exits 1 and `status` says NOT READY, with the same explanation. `start` and `restart` wait for it up to
# STOMPFAST_BROKERS_TIMEOUT seconds and exit non-zero (with the tail of the broker's log) otherwise.
# Everything listens on 127.0.0.1 only.
#
# RabbitMQ (Debian package rabbitmq-server; AMQP 5672, guest/guest):
#   `start` starts the node if it is down (`rabbitmq-server -detached`), starts the rabbit app if it
#   was stopped with `stop rabbitmq`, pins the STOMP and Web-STOMP listeners to 127.0.0.1 (set in the
#   running node's application environment, persistent until the node stops; /etc is not touched),
#   and enables the bundled plugins rabbitmq_stomp (STOMP, 61613) and rabbitmq_web_stomp (15674, /ws).
#   If the plugins were already running on other listeners (enabled outside this script: they bind
#   0.0.0.0), the first `start` disables and re-enables them once (about 10 s).
#   If the package is missing it is installed with apt-get (about 10 s; the package's own service is
#   not started by its install here, so `start` then starts the node as above: about 20 s in all).
#   STOMP over TLS on 127.0.0.1:61617: `start` (and `restart`) also make a throwaway CA and a server
#   certificate for 127.0.0.1/localhost with openssl (once; EC P-256, 10 years) under
#   $STOMPFAST_BROKERS_DIR/tls/ (ca.pem, server.pem, server.key, and bad-ca.pem: a second,
#   self-signed CA that signed nothing, for the refused-certificate tests), then ADD a TLS listener
#   to the running rabbitmq_stomp plugin with one `rabbitmqctl eval`: a child of rabbit_stomp_sup
#   built with rabbit_networking:tcp_listener_spec (transport ranch_ssl), started with
#   supervisor:start_child. Nothing else is restarted: connections on 61613/15674 are not touched.
#   The certificate and key are handed to the node in the eval itself (DER, base64), so the files
#   need not be readable by the rabbitmq user and /etc is not touched. The listener's connection
#   module is a one-line wrapper of rabbit_stomp_client_sup compiled into the node by the same eval
#   (stompfast_stomp_tls), so that copies of this script that count every rabbit_stomp_client_sup
#   listener as the plain STOMP one do not see a mismatch. It lives until the stomp plugin or the
#   rabbit app stops (`restart rabbitmq` adds it again; a `stop_app` by anybody else drops it until
#   the next `start`). If the listener is already up with another checkout's certificate, that
#   certificate and its CA are adopted (copied into tls/) rather than replaced.
# RabbitMQ 4 (`rabbitmq4`; Debian forky's rabbitmq-server 4.3.6 on Erlang 29, in the chroot that
#   scripts/forky.sh makes under $STOMPFAST_FORKY_DIR, default $STOMPFAST_BROKERS_DIR/forky):
#   a second node beside the 3.10 one, named rabbit4@localhost, with its own ports (below), its own
#   epmd (ERL_EPMD_PORT 4370) and erlang cookie, everything on 127.0.0.1. The first `start rabbitmq4`
#   makes the chroot (scripts/forky.sh ensure, about 45 s); every start writes the node's
#   /etc/rabbitmq/rabbitmq.conf and enabled_plugins inside the chroot (rabbitmq_stomp and
#   rabbitmq_web_stomp; listeners, guest/guest from loopback only, and a STOMP TLS listener with the
#   same throwaway CA and server certificate as the 3.10 node's, copied to /etc/rabbitmq/stompfast-tls/
#   readable by the chroot's rabbitmq user); when any of that changed and the node is up, the node is
#   shut down and started again (the node reads it at boot only). The node runs as the chroot's
#   rabbitmq user (setpriv, no PAM session: its open-files limit is the hard limit, raised to 65,536
#   first where allowed; 20,000 in this container, as for the 3.10 node), in the foreground under
#   setsid, in the private mount namespace of `forky.sh run`; rabbitmqctl for it runs inside the
#   chroot the same way. Logs: <chroot>/var/log/rabbitmq/rabbit4@localhost.log and startup_log.
#   Measured on this 2-core machine: `start rabbitmq4` without a chroot 46 s (41 s of it forky.sh
#   ensure); with the chroot and the node down 4.4-5.9 s; with the node running 1.0 s; after
#   `stop rabbitmq4` 3.0-3.4 s; `restart rabbitmq4` 3.1-3.6 s. The node: 130-165 MB RSS.
#   STOMPFAST_RABBITMQ4_DENY_TRANSIENT_NONEXCL=1 adds `deprecated_features.permit.transient_nonexcl_queues
#   = false` (default 0: the node's own default, permitted): a subscription to a non-durable,
#   non-exclusive queue (e.g. /queue/x with durable:false and exclusive:false; durable:false alone
#   makes the STOMP adapter declare the queue exclusive, which stays allowed) then gets two ERROR
#   frames ("Processing error", then "AMQP channel died" with the reason) and the connection closes.
#   Changing it restarts the node at the next `start rabbitmq4`. To shut the node down entirely:
#   `scripts/forky.sh run` its rabbitmqctl shutdown, or SIGTERM its beam.smp.
#   `env rabbitmq4` prints the ordinary variables (STOMPFAST_RABBITMQ_URL, _WS_URL, _TLS_URL, _PORT,
#   _WS_PORT, _TLS_PORT, _AMQP_PORT) with the 4.x node's values and STOMPFAST_RABBITMQ_NODE=rabbitmq4
#   (plain `env` prints the same variables for the 3.10 node and STOMPFAST_RABBITMQ_NODE=rabbitmq, so
#   evaluating either one after the other switches every RabbitMQ variable over). With STOMPFAST_RABBITMQ_NODE=rabbitmq4 in the
#   environment this script reads STOMPFAST_RABBITMQ_PORT, _WS_PORT, _TLS_PORT and _AMQP_PORT as the 4.x
#   node's (under its own STOMPFAST_RABBITMQ4_* variables) and gives the 3.10 node its default ports;
#   `rabbitmq` always means the 3.10 node (a test that restarts the broker under test must name
#   "$STOMPFAST_RABBITMQ_NODE"). `start` and `restart` of either node refuse when the two would share
#   a port (say a STOMPFAST_RABBITMQ_PORT left over from an earlier `env rabbitmq4`).
# ActiveMQ Classic (Debian package activemq, 5.17.2; installed with apt-get when missing):
#   one private instance, non-persistent, no JMX, config/data/log/pid under $STOMPFAST_BROKERS_DIR
#   (default <repo>/.brokers, git-ignored), STOMP on 61614 (plain) and 61615 (stomp+nio), max frame
#   100 MiB, any login accepted. No WebSocket: Debian's package ships no jetty/activemq-http.
# ActiveMQ Artemis (org.apache.activemq:apache-artemis:$STOMPFAST_ARTEMIS_VERSION:tar.gz:bin, 2.40.0):
#   the first `start` fetches the distribution with Maven (`mvn dependency:copy`, from Maven Central;
#   about 10-20 s) and caches the tarball and the unpacked tree under $STOMPFAST_BROKERS_DIR/artemis/dist/,
#   so later starts are offline; then `artemis create --silent` makes an instance in artemis/instance/
#   (again when the version changes): non-persistent, no web console, user guest/guest, and
#   anonymous logins (no passcode) accepted as guest, a wrong passcode refused (the guest login
#   module gets credentialsInvalidate=true). Every start rewrites etc/broker.xml from what create wrote
#   (etc/broker.xml.created): only two acceptors, both on 127.0.0.1 (none of Artemis's defaults:
#   61616, 5672, 61613, 5445, 1883), the stock STOMP acceptor of `artemis create`
#   (protocols=STOMP, nothing else changed) on 61618, and the same with
#   anycastPrefix=/queue/;multicastPrefix=/topic/ on 61619. STOMP over WebSocket is that stock
#   acceptor too (its netty acceptor answers an HTTP upgrade on any path; subprotocols v10.stomp,
#   v11.stomp, v12.stomp; at most 65,536 bytes per WebSocket frame): ws://127.0.0.1:61618/.
#   Started in the background with `bin/artemis run` (setsid; log artemis/artemis.log, pid file
#   artemis/artemis.pid), heap -Xms64m -Xmx1g, global-max-size 128 MiB (see art_start). Ready when both ports answer CONNECT and the
#   WebSocket upgrade is accepted; the readiness timeout does not count the download.
#   Needs java 17+ on PATH and, for the first start of a version, mvn.#
# What stop does:
#   stop activemq  SIGTERM to the instance this script started (pid file, or its unique config path
#                  on the command line), SIGKILL after STOMPFAST_ACTIVEMQ_STOP_TIMEOUT seconds.
#   stop rabbitmq  `rabbitmqctl stop_app`: the Erlang node stays up, every listener (AMQP, STOMP,
#                  Web-STOMP) closes and every connection is dropped; `start rabbitmq` brings it back
#                  with `start_app` in a second or two. The node itself is never shut down.
#   stop rabbitmq4 `rabbitmqctl stop_app` on the 4.x node, as for rabbitmq.
#   stop artemis   SIGTERM to the instance this script started (pid file, or -Dartemis.instance=<our
#                  instance> on a java command line), SIGKILL after STOMPFAST_ARTEMIS_STOP_TIMEOUT s.
#   stop / stop all  ActiveMQ and Artemis. RabbitMQ is a machine-wide service; stop it only by name.
# What restart does:
#   restart rabbitmq  `rabbitmqctl stop_app && rabbitmqctl start_app` (starts the node if it is down),
#                     then waits for STOMP again. Non-durable queues and all connections are lost.
#   restart rabbitmq4 the same on the 4.x node (a full node restart instead if its settings changed).
#   restart activemq  stop activemq + start activemq (non-persistent: every message is lost).
#   restart artemis   stop artemis + start artemis (non-persistent: every message is lost); about
#                     2 s to stop and 8-12 s to be ready again on this 2-core machine under load.
#
# Environment overrides (defaults in brackets):
#   STOMPFAST_RABBITMQ_PORT      [61613]  RabbitMQ STOMP port
#   STOMPFAST_RABBITMQ_WS_PORT   [15674]  RabbitMQ Web-STOMP port (path /ws)
#   STOMPFAST_RABBITMQ_TLS_PORT  [61617]  RabbitMQ STOMP-over-TLS port
#   STOMPFAST_ACTIVEMQ_PORT      [61614]  ActiveMQ STOMP port
#   STOMPFAST_ACTIVEMQ_NIO_PORT  [61615]  ActiveMQ stomp+nio port
#   STOMPFAST_BROKERS_TIMEOUT    [120]    seconds to wait for readiness in start/restart
#   STOMPFAST_BROKERS_DIR        [<repo>/.brokers]  ActiveMQ and Artemis instances, tls/, lock file, apt log
#   STOMPFAST_ACTIVEMQ_JAVA_OPTS [-Xms64m -Xmx1g]   extra JVM options for ActiveMQ
#   STOMPFAST_ACTIVEMQ_STOP_TIMEOUT [20]  seconds between SIGTERM and SIGKILL
#   STOMPFAST_ARTEMIS_PORT       [61618]  Artemis STOMP port, stock acceptor (also STOMP over WebSocket)
#   STOMPFAST_ARTEMIS_PREFIX_PORT [61619] Artemis STOMP port with the /queue/ and /topic/ prefixes
#   STOMPFAST_ARTEMIS_VERSION    [2.40.0] Artemis version fetched from Maven Central
#   STOMPFAST_ARTEMIS_JAVA_OPTS  [-Xms64m -Xmx1g]    extra JVM options for Artemis (after the profile's)
#   STOMPFAST_ARTEMIS_GLOBAL_MAX [128MiB]  broker.xml's global-max-size: messages held in memory at most
#   STOMPFAST_ARTEMIS_STOP_TIMEOUT [20]   seconds between SIGTERM and SIGKILL
#   STOMPFAST_RABBITMQ4_PORT     [61623]  RabbitMQ 4 STOMP port
#   STOMPFAST_RABBITMQ4_WS_PORT  [15684]  RabbitMQ 4 Web-STOMP port (path /ws)
#   STOMPFAST_RABBITMQ4_TLS_PORT [61627]  RabbitMQ 4 STOMP-over-TLS port
#   STOMPFAST_RABBITMQ4_AMQP_PORT [5682]  RabbitMQ 4 AMQP port
#   STOMPFAST_RABBITMQ4_DIST_PORT [25682] RabbitMQ 4 Erlang distribution port
#   STOMPFAST_RABBITMQ4_EPMD_PORT [4370]  RabbitMQ 4 epmd port (ERL_EPMD_PORT)
#   STOMPFAST_RABBITMQ4_CTL_DIST_PORT_MIN [35692]  its rabbitmqctl's distribution ports (11 from there)
#   STOMPFAST_RABBITMQ4_DENY_TRANSIENT_NONEXCL [0]  1: deny the deprecated feature transient_nonexcl_queues
#   STOMPFAST_RABBITMQ_NODE      [rabbitmq]  rabbitmq4: the STOMPFAST_RABBITMQ_*PORT variables are the 4.x node's
#   STOMPFAST_FORKY_DIR          [$STOMPFAST_BROKERS_DIR/forky]  the chroot of RabbitMQ 4 (scripts/forky.sh)
#   PYTHON                       [python3]  any Python 3 (stdlib only) for the readiness probe
# `env` prints, from the same settings:
#   STOMPFAST_RABBITMQ_URL=stomp://guest:guest@127.0.0.1:61613/
#   STOMPFAST_RABBITMQ_WS_URL=ws://guest:guest@127.0.0.1:15674/ws
#   STOMPFAST_RABBITMQ_TLS_URL=stomp+ssl://guest:guest@127.0.0.1:61617/
#   STOMPFAST_RABBITMQ_PORT=61613, _WS_PORT=15674, _TLS_PORT=61617, _AMQP_PORT=5672
#   STOMPFAST_RABBITMQ_NODE=rabbitmq   (`env rabbitmq4`: the 4.x node's URLs, its ports and rabbitmq4 instead)
#   STOMPFAST_TLS_CA=<brokers dir>/tls/ca.pem           the CA that signed the TLS listener's certificate
#   STOMPFAST_TLS_BAD_CA=<brokers dir>/tls/bad-ca.pem   a CA that signed nothing the brokers use
#   STOMPFAST_ACTIVEMQ_URL=stomp://guest:guest@127.0.0.1:61614/
#   STOMPFAST_ACTIVEMQ_NIO_URL=stomp://guest:guest@127.0.0.1:61615/
#   STOMPFAST_ARTEMIS_URL=stomp://guest:guest@127.0.0.1:61618/
#   STOMPFAST_ARTEMIS_PREFIX_URL=stomp://guest:guest@127.0.0.1:61619/
#   STOMPFAST_ARTEMIS_WS_URL=ws://guest:guest@127.0.0.1:61618/
#   STOMPFAST_BROKERS_SCRIPT=<absolute path of this script>   (tests call `$it restart rabbitmq`)
set -euo pipefail

SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd)

HOST=127.0.0.1
case ${STOMPFAST_RABBITMQ_NODE:-rabbitmq} in
    rabbitmq)
        RABBIT_PORT=${STOMPFAST_RABBITMQ_PORT:-61613}
        RABBIT_WS_PORT=${STOMPFAST_RABBITMQ_WS_PORT:-15674}
        RABBIT_TLS_PORT=${STOMPFAST_RABBITMQ_TLS_PORT:-61617}
        R4_PORT=${STOMPFAST_RABBITMQ4_PORT:-61623}
        R4_WS_PORT=${STOMPFAST_RABBITMQ4_WS_PORT:-15684}
        R4_TLS_PORT=${STOMPFAST_RABBITMQ4_TLS_PORT:-61627}
        R4_AMQP_PORT=${STOMPFAST_RABBITMQ4_AMQP_PORT:-5682} ;;
    rabbitmq4)
        # `env rabbitmq4` was evaluated: the ordinary STOMPFAST_RABBITMQ_*_PORT variables name the
        # 4.x node (what that printed), never the 3.10 one, which keeps its default ports.
        RABBIT_PORT=61613 RABBIT_WS_PORT=15674 RABBIT_TLS_PORT=61617
        R4_PORT=${STOMPFAST_RABBITMQ4_PORT:-${STOMPFAST_RABBITMQ_PORT:-61623}}
        R4_WS_PORT=${STOMPFAST_RABBITMQ4_WS_PORT:-${STOMPFAST_RABBITMQ_WS_PORT:-15684}}
        R4_TLS_PORT=${STOMPFAST_RABBITMQ4_TLS_PORT:-${STOMPFAST_RABBITMQ_TLS_PORT:-61627}}
        R4_AMQP_PORT=${STOMPFAST_RABBITMQ4_AMQP_PORT:-${STOMPFAST_RABBITMQ_AMQP_PORT:-5682}} ;;
    *)
        echo "brokers: ERROR: STOMPFAST_RABBITMQ_NODE must be rabbitmq or rabbitmq4, not '$STOMPFAST_RABBITMQ_NODE'" >&2; exit 1 ;;
esac
R4_DIST_PORT=${STOMPFAST_RABBITMQ4_DIST_PORT:-25682}
R4_EPMD_PORT=${STOMPFAST_RABBITMQ4_EPMD_PORT:-4370}
R4_CTL_DIST_PORT_MIN=${STOMPFAST_RABBITMQ4_CTL_DIST_PORT_MIN:-35692}
R4_DENY_TRANSIENT_NONEXCL=${STOMPFAST_RABBITMQ4_DENY_TRANSIENT_NONEXCL:-0}
AMQ_PORT=${STOMPFAST_ACTIVEMQ_PORT:-61614}
AMQ_NIO_PORT=${STOMPFAST_ACTIVEMQ_NIO_PORT:-61615}
TIMEOUT=${STOMPFAST_BROKERS_TIMEOUT:-120}
BROKERS_DIR=${STOMPFAST_BROKERS_DIR:-$REPO/.brokers}
AMQ_JAVA_OPTS=${STOMPFAST_ACTIVEMQ_JAVA_OPTS:--Xms64m -Xmx1g}
AMQ_STOP_TIMEOUT=${STOMPFAST_ACTIVEMQ_STOP_TIMEOUT:-20}
ART_PORT=${STOMPFAST_ARTEMIS_PORT:-61618}
ART_PREFIX_PORT=${STOMPFAST_ARTEMIS_PREFIX_PORT:-61619}
ART_VERSION=${STOMPFAST_ARTEMIS_VERSION:-2.40.0}
ART_JAVA_OPTS=${STOMPFAST_ARTEMIS_JAVA_OPTS:--Xms64m -Xmx1g}
ART_GLOBAL_MAX=${STOMPFAST_ARTEMIS_GLOBAL_MAX:-128MiB}
ART_STOP_TIMEOUT=${STOMPFAST_ARTEMIS_STOP_TIMEOUT:-20}
ART_RESTART_KILL_AFTER=$ART_STOP_TIMEOUT
PY=${PYTHON:-python3}
for v in RABBIT_PORT RABBIT_WS_PORT RABBIT_TLS_PORT AMQ_PORT AMQ_NIO_PORT TIMEOUT AMQ_STOP_TIMEOUT \
         ART_PORT ART_PREFIX_PORT ART_STOP_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "brokers: ERROR: $v must be a positive integer, not '${!v}'" >&2; exit 1; }
done
for v in R4_PORT R4_WS_PORT R4_TLS_PORT R4_AMQP_PORT R4_DIST_PORT R4_EPMD_PORT R4_CTL_DIST_PORT_MIN; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "brokers: ERROR: $v (STOMPFAST_RABBITMQ4_...) must be a positive integer, not '${!v}'" >&2; exit 1; }
done
[[ $R4_DENY_TRANSIENT_NONEXCL =~ ^[01]$ ]] \
    || { echo "brokers: ERROR: STOMPFAST_RABBITMQ4_DENY_TRANSIENT_NONEXCL must be 0 or 1, not '$R4_DENY_TRANSIENT_NONEXCL'" >&2; exit 1; }
[[ $ART_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
    || { echo "brokers: ERROR: STOMPFAST_ARTEMIS_VERSION must look like 2.40.0, not '$ART_VERSION'" >&2; exit 1; }

TLS_DIR=$BROKERS_DIR/tls
case $TLS_DIR in /*) ;; *) TLS_DIR=$PWD/$TLS_DIR ;; esac

AMQ_HOME=/usr/share/activemq
AMQ_JAR=$AMQ_HOME/bin/activemq.jar
AMQ_DIR=$BROKERS_DIR/activemq
AMQ_CONF=$AMQ_DIR/conf
AMQ_XML=$AMQ_CONF/activemq.xml
AMQ_DATA=$AMQ_DIR/data
AMQ_PIDFILE=$AMQ_DIR/activemq.pid
AMQ_LOG=$AMQ_DIR/activemq.log

FORKY=$(dirname "$SCRIPT")/forky.sh
R4_ROOT=${STOMPFAST_FORKY_DIR:-$BROKERS_DIR/forky}
case $R4_ROOT in /*) ;; *) R4_ROOT=$PWD/$R4_ROOT ;; esac
R4_ROOT=${R4_ROOT%/}
R4_NODE=rabbit4@localhost
R4_LOG_DIR=$R4_ROOT/var/log/rabbitmq
R4_STARTUP_LOG=$R4_LOG_DIR/startup_log

ART_DIR=$BROKERS_DIR/artemis
case $ART_DIR in /*) ;; *) ART_DIR=$PWD/$ART_DIR ;; esac
ART_DIST=$ART_DIR/dist
ART_TGZ=$ART_DIST/apache-artemis-$ART_VERSION-bin.tar.gz
ART_HOME=$ART_DIST/apache-artemis-$ART_VERSION
ART_INST=$ART_DIR/instance
ART_PIDFILE=$ART_DIR/artemis.pid
ART_LOG=$ART_DIR/artemis.log

rabbit_url()     { echo "stomp://guest:guest@$HOST:$RABBIT_PORT/"; }
rabbit_ws_url()  { echo "ws://guest:guest@$HOST:$RABBIT_WS_PORT/ws"; }
rabbit_tls_url() { echo "stomp+ssl://guest:guest@$HOST:$RABBIT_TLS_PORT/"; }
r4_url()         { echo "stomp://guest:guest@$HOST:$R4_PORT/"; }
r4_ws_url()      { echo "ws://guest:guest@$HOST:$R4_WS_PORT/ws"; }
r4_tls_url()     { echo "stomp+ssl://guest:guest@$HOST:$R4_TLS_PORT/"; }
amq_url()        { echo "stomp://guest:guest@$HOST:$AMQ_PORT/"; }
amq_nio_url()    { echo "stomp://guest:guest@$HOST:$AMQ_NIO_PORT/"; }
art_url()        { echo "stomp://guest:guest@$HOST:$ART_PORT/"; }
art_prefix_url() { echo "stomp://guest:guest@$HOST:$ART_PREFIX_PORT/"; }
art_ws_url()     { echo "ws://guest:guest@$HOST:$ART_PORT/"; }

say()  { printf 'brokers: %s\n' "$*" >&2; }
die()  { printf 'brokers: ERROR: %s\n' "$*" >&2; exit 1; }
now()  { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
usage() { sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d; s/^# \{0,1\}//'; }

SUDO=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 && SUDO=(sudo) || true
fi

# ---------------------------------------------------------------------------------------------
# Probes (stdlib-only Python; one attempt each; print a reason and exit 1 when not ready)

STOMP_PROBE='
import socket, sys
host, port, tmo = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
cafile = sys.argv[4] if len(sys.argv) > 4 else None
try:
    s = socket.create_connection((host, port), timeout=tmo)
except OSError as e:
    print("TCP connect failed: %s" % (e.strerror or e)); sys.exit(1)
try:
    if cafile:
        import ssl
        s = ssl.create_default_context(cafile=cafile).wrap_socket(s, server_hostname=host)
    s.settimeout(tmo)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
    buf = b""
    while b"\0" not in buf and len(buf) < 65536:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    head = buf.lstrip(b"\r\n").split(b"\0", 1)[0].decode("utf-8", "replace")
    lines = head.replace("\r\n", "\n").split("\n")
    if lines[0] == "CONNECTED":
        try:
            s.sendall(b"DISCONNECT\n\n\0")
        except OSError:
            pass
        sys.exit(0)
    if lines[0] == "ERROR":
        msg = [l for l in lines[1:] if l.startswith("message:")]
        print("ERROR frame: %s" % (msg[0][8:] if msg else head[:200].replace("\n", " | ")))
    elif buf:
        print("unexpected reply: %r" % buf[:80])
    else:
        print("connection closed without a reply")
except socket.timeout:
    print("no CONNECTED within %.1fs" % tmo)
except OSError as e:
    print("socket error: %s" % (e.strerror or e))
finally:
    s.close()
sys.exit(1)
'

WS_PROBE='
import socket, sys
host, port, tmo = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
path = sys.argv[4] if len(sys.argv) > 4 else "/ws"
try:
    s = socket.create_connection((host, port), timeout=tmo)
    s.settimeout(tmo)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: v12.stomp\r\n\r\n" % (path, host, port)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf and len(buf) < 65536:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    s.close()
except OSError as e:
    print("%s" % (e.strerror or e)); sys.exit(1)
status = buf.split(b"\r\n", 1)[0].decode("latin-1")
if status.split(" ")[1:2] == ["101"]:
    sys.exit(0)
print("HTTP upgrade answered %r" % (status or "nothing")); sys.exit(1)
'

stomp_probe() { "$PY" -c "$STOMP_PROBE" "$HOST" "$1" "${2:-3}"; }
tls_probe()   { "$PY" -c "$STOMP_PROBE" "$HOST" "$1" "${2:-3}" "$TLS_DIR/ca.pem"; }
ws_probe()    { "$PY" -c "$WS_PROBE" "$HOST" "$1" "${2:-3}"; }
art_ws_probe() { "$PY" -c "$WS_PROBE" "$HOST" "$1" "${2:-3}" /; }

# wait_ready KIND PORT DEADLINE [ALIVE_FN]: retry the probe until it passes or the deadline
# (epoch seconds) passes; ALIVE_FN, if given, aborts early when the broker process has died.
wait_ready() {
    local kind=$1 port=$2 deadline=$3 alive=${4:-} reason left
    while :; do
        left=$(awk -v d="$deadline" -v n="$(now)" 'BEGIN { l = d - n; if (l > 3) l = 3; printf "%.2f", l }')
        if awk -v l="$left" 'BEGIN { exit !(l > 0.05) }'; then
            if reason=$("${kind}_probe" "$port" "$left"); then return 0; fi
        fi
        LAST_REASON=${reason:-timed out}
        if [ -n "$alive" ] && ! "$alive"; then LAST_REASON="broker process exited ($LAST_REASON)"; return 1; fi
        awk -v d="$deadline" -v n="$(now)" 'BEGIN { exit !(n + 0.25 < d) }' || return 1
        sleep 0.25
    done
}

# ---------------------------------------------------------------------------------------------
# Installation

apt_install() {  # apt_install PACKAGE: quiet, non-interactive; `apt-get update` only when installing
    local pkg=$1 log=$BROKERS_DIR/apt.log t0
    if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then return 0; fi
    command -v apt-get >/dev/null 2>&1 || die "$pkg is not installed and apt-get is not available"
    [ "$(id -u)" = 0 ] || [ ${#SUDO[@]} -gt 0 ] || die "$pkg is not installed; run as root (or install it)"
    t0=$(now)
    say "installing Debian package $pkg (apt-get update + install; log: $log)"
    if ! { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 update \
           && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 \
              install "$pkg"; } >"$log" 2>&1 9>&-; then
        tail -n 30 "$log" >&2
        die "apt-get install $pkg failed (full log: $log)"
    fi
    say "installed $pkg in $(since "$t0") s"
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ

# With R4=1 (R4=1 rabbit_inspect, ...), the same rabbitmqctl call goes to the 4.x node in the chroot.
R4=0
ctl() { if [ "$R4" = 1 ]; then r4_ctl "$@"; else "${SUDO[@]}" rabbitmqctl "$@"; fi; }

# rabbit_ports_check: the 3.10 and 4.x nodes must not be given a port in common (say a
# STOMPFAST_RABBITMQ_PORT left over from an earlier `eval "$(brokers.sh env rabbitmq4)"`): `start
# rabbitmq` would move the 3.10 node's listeners onto the 4.x node's ports.
rabbit_ports_check() {
    local a b
    for a in "$RABBIT_PORT" "$RABBIT_WS_PORT" "$RABBIT_TLS_PORT"; do
        for b in "$R4_PORT" "$R4_WS_PORT" "$R4_TLS_PORT" "$R4_AMQP_PORT"; do
            [ "$a" != "$b" ] || die "port $a is given to both RabbitMQ 3.10 (STOMPFAST_RABBITMQ_*PORT: $RABBIT_PORT, $RABBIT_WS_PORT, $RABBIT_TLS_PORT) and RabbitMQ 4 ($R4_PORT, $R4_WS_PORT, $R4_TLS_PORT, $R4_AMQP_PORT); left over from eval \"\$(brokers.sh env rabbitmq4)\"? set STOMPFAST_RABBITMQ_NODE=rabbitmq4 or unset STOMPFAST_RABBITMQ_PORT, _WS_PORT, _TLS_PORT"
        done
    done
}

# One rabbitmqctl call (listeners read from ranch, which reflects the open sockets; the
# rabbit_networking table keeps a stale web-stomp entry after a plugin restart): with "pin", first pin the STOMP listeners to loopback in the node's
# application environment (persistent: survives stop_app/start_app and plugin (re)loads until the
# node stops); then report
# "running plugins=<n of 2 active> stomp=<ip:port,...> ws=<ip:port,...> tls=<ip:port,...>" (stomp=
# plain TCP listeners only), "stopped" (stop_app),
# or "booting:<phase>"; prints nothing (rabbitmqctl exits 69) when the node is down.
rabbit_inspect() {
    local expr pin=""
    if [ "${1:-}" = pin ]; then
        pin="application:set_env(rabbitmq_stomp, tcp_listeners, [{\"$HOST\", $RABBIT_PORT}], [{persistent, true}]),"
        pin+=" application:set_env(rabbitmq_web_stomp, tcp_config, [{ip, \"$HOST\"}, {port, $RABBIT_WS_PORT}], [{persistent, true}]),"
    fi
    expr=$(tr '\n' ' ' <<EOF
$pin
Fmt = fun(any, P) -> "*:" ++ integer_to_list(P);
         (A, P) when is_tuple(A) -> inet:ntoa(A) ++ ":" ++ integer_to_list(P);
         (A, P) -> A ++ ":" ++ integer_to_list(P) end,
Opts = fun(#{socket_opts := O}) -> O; (O) when is_list(O) -> O; (_) -> [] end,
case rabbit:is_running() of
  false -> case rabbit_boot_state:get() of stopped -> "stopped"; B -> "booting:" ++ atom_to_list(B) end;
  true ->
    L = [{maps:get(protocol, I, none), maps:get(port, I, 0),
          proplists:get_value(ip, Opts(maps:get(transport_options, I, [])), any), maps:get(transport, I, none)}
         || {_, I} <- maps:to_list(ranch:info()), maps:get(status, I, running) =:= running],
    Act = rabbit_plugins:active(),
    N = length([X || X <- [rabbitmq_stomp, rabbitmq_web_stomp], lists:member(X, Act)]),
    S = [Fmt(A, P) || {rabbit_stomp_client_sup, P, A, ranch_tcp} <- L],
    W = [Fmt(A, P) || {rabbit_web_stomp_connection_sup, P, A, _} <- L],
    T = [Fmt(A, P) || {M, P, A, ranch_ssl} <- L, M =:= rabbit_stomp_client_sup orelse M =:= stompfast_stomp_tls],
    lists:flatten(["running plugins=", integer_to_list(N), " stomp=", lists:join(",", S),
                   " ws=", lists:join(",", W), " tls=", lists:join(",", T)])
end.
EOF
)
    ctl -q eval "$expr" 2>/dev/null | tr -d '"'
}

rabbit_start_node() {
    say "RabbitMQ node is down: rabbitmq-server -detached"
    # Application env given on the command line applies before the plugins boot, so STOMP never
    # binds 0.0.0.0 even when enabled_plugins already lists it.
    local args="-rabbitmq_stomp tcp_listeners [{\"$HOST\",$RABBIT_PORT}]"
    args+=" -rabbitmq_web_stomp tcp_config [{ip,\"$HOST\"},{port,$RABBIT_WS_PORT}]"
    # The node holds a file handle per queue while it recovers them at boot. Debian's wrapper
    # starts it through `su rabbitmq`, whose PAM session puts the soft open-files limit back to
    # 1024, and a node with more queues than that never leaves "booting" (seen with 2,277 queues
    # left by test runs). So the node is started as the rabbitmq user by a shell that first raises
    # its soft limit to the hard one, which this script raises to 65,536 first when it may.
    local server raise
    server=$(command -v rabbitmq-server)
    # shellcheck disable=SC2016  # expanded by the rabbitmq user's shell, not here
    raise='ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$0" -detached'
    (
        ulimit -n 65536 2>/dev/null || true
        hard=$(ulimit -Hn)
        if [ "$hard" != unlimited ] && [ "$hard" -lt 4096 ]; then
            say "open-files hard limit is $hard: a node holding more queues than that stays booting"
        fi
        "${SUDO[@]}" env RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="$args" RABBITMQ_NODE_IP_ADDRESS="$HOST" \
            ERL_EPMD_ADDRESS="$HOST" su rabbitmq -s /bin/sh -c "$raise" "$server" 9>&-
    ) || die "rabbitmq-server -detached failed; see /var/log/rabbitmq/startup_err"
}

# rabbit_clean: delete the queues that stompfast's tests, load generator and benchmarks name
# with a random suffix. RabbitMQ's /queue/ destinations are durable, so every test run used to
# leave a few hundred behind and the node's boot time grew with them. One eval deletes them all
# (about 2 s per thousand); the prefixes are the ones the project's code generates, so a user's
# own queues are never touched.
rabbit_clean() {
    local expr n
    expr=$(cat <<'EOF'
P = ["stompfast-test-", "stompfast-lg-", "stompfast-cli-", "stompfast-spark-", "stompfast-soak-",
     "stompfast-bench-", "sf-bench-"],
Ours = fun(Q) ->
    N = binary_to_list(element(4, amqqueue:get_name(Q))),
    lists:any(fun(X) -> lists:prefix(X, N) end, P)
end,
Qs = lists:filter(Ours, rabbit_amqqueue:list(<<"/">>)),
[rabbit_amqqueue:delete(Q, false, false, <<"stompfast-brokers">>) || Q <- Qs],
length(Qs).
EOF
)
    local who=RabbitMQ; [ "$R4" = 1 ] && who="RabbitMQ 4"
    n=$(ctl -q eval "$expr" 2>/dev/null) || { say "$who: not running, nothing to clean"; return 0; }
    say "$who: deleted $n leftover test queue(s)"
}

# tail_logs N FILE...: the last N lines of each non-empty FILE, on stderr, each under its name
tail_logs() {
    local n=$1 f
    shift
    for f in "$@"; do
        [ -s "$f" ] || continue
        echo "----- tail of $f" >&2
        tail -n "$n" "$f" >&2
    done
}

rabbit_log_tail() {
    local f newest=""
    for f in /var/log/rabbitmq/rabbit@*.log; do
        [[ $f == *_upgrade.log ]] && continue
        if [ -z "$newest" ] || [ "$f" -nt "$newest" ]; then newest=$f; fi
    done
    tail_logs "${1:-30}" $newest /var/log/rabbitmq/startup_err
}

rabbit_fail() { say "RabbitMQ: $*"; rabbit_log_tail 40; die "RabbitMQ is not ready: $*"; }

# rabbit_up DEADLINE: node running, rabbit app running, plugins active on the expected loopback ports.
rabbit_up() {
    local deadline=$1 state="" want_s="$HOST:$RABBIT_PORT" want_w="$HOST:$RABBIT_WS_PORT" started=0
    command -v rabbitmqctl >/dev/null 2>&1 || apt_install rabbitmq-server
    while :; do
        state=$(rabbit_inspect pin || true)
        case $state in
            running*) break ;;
            stopped)
                say "RabbitMQ app is stopped: rabbitmqctl start_app"
                ctl -q start_app >/dev/null || rabbit_fail "rabbitmqctl start_app failed" ;;
            booting*)
                sleep 0.5 ;;
            *)
                if [ $started = 0 ]; then rabbit_start_node; started=1; fi
                sleep 1 ;;
        esac
        awk -v d="$deadline" -v n="$(now)" 'BEGIN { exit !(n < d) }' \
            || rabbit_fail "node not running after ${TIMEOUT}s (last state: ${state:-node down})"
    done
    if [[ $state != *"plugins=2"* ]]; then
        say "enabling rabbitmq_stomp and rabbitmq_web_stomp"
        "${SUDO[@]}" rabbitmq-plugins -q enable rabbitmq_stomp rabbitmq_web_stomp >/dev/null \
            || rabbit_fail "rabbitmq-plugins enable failed"
        state=$(rabbit_inspect || true)
    fi
    if [[ $state != *" stomp=$want_s ws=$want_w tls="* ]]; then
        # Plugins were already running with other listeners (enabled before this script pinned
        # them, or another port asked for): restart the plugins so they pick up the new env.
        say "re-binding STOMP listeners to $want_s and $want_w (were: $state)"
        if ! { "${SUDO[@]}" rabbitmq-plugins -q disable rabbitmq_web_stomp rabbitmq_stomp >/dev/null \
               && "${SUDO[@]}" rabbitmq-plugins -q enable rabbitmq_stomp rabbitmq_web_stomp >/dev/null; }; then
            rabbit_fail "rabbitmq-plugins disable/enable failed"
        fi
        state=$(rabbit_inspect || true)
        [[ $state == *" stomp=$want_s ws=$want_w tls="* ]] \
            || rabbit_fail "listeners are '$state', wanted stomp=$want_s ws=$want_w"
    fi
}

# ---------------------------------------------------------------------------------------------
# TLS: a throwaway CA and server certificate, and RabbitMQ's STOMP TLS listener

# tls_material: make $TLS_DIR/{ca.pem,ca.key,server.pem,server.key,bad-ca.pem} unless they exist and
# the server certificate verifies against the CA. Written to a temporary directory, then moved.
tls_material() {
    local tmp
    if [ -s "$TLS_DIR/ca.pem" ] && [ -s "$TLS_DIR/server.pem" ] && [ -s "$TLS_DIR/server.key" ] \
       && [ -s "$TLS_DIR/bad-ca.pem" ] \
       && openssl verify -CAfile "$TLS_DIR/ca.pem" "$TLS_DIR/server.pem" >/dev/null 2>&1; then
        return 0
    fi
    command -v openssl >/dev/null 2>&1 || apt_install openssl
    mkdir -p "$BROKERS_DIR"
    tmp=$(mktemp -d "$BROKERS_DIR/tls.new.XXXXXX")
    if ! (
        set -e
        cd "$tmp"
        umask 077
        ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
        for ca in ca bad-ca; do
            openssl req -x509 -new "${ec[@]}" -keyout "$ca.key" -out "$ca.pem" -days 3650 -sha256 \
                -subj "/O=stompfast tests/CN=stompfast test $ca (throwaway)" \
                -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
                -addext "subjectKeyIdentifier=hash"
        done
        rm -f bad-ca.key
        openssl req -new "${ec[@]}" -keyout server.key -out server.csr -subj "/O=stompfast tests/CN=localhost"
        printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
            "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" \
            "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid,issuer" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 12)" \
            -days 3650 -sha256 -extfile server.ext -out server.pem
        rm -f server.csr server.ext
        chmod 644 ca.pem bad-ca.pem server.pem
        openssl verify -CAfile ca.pem server.pem
    ) >"$tmp/openssl.log" 2>&1; then
        cat "$tmp/openssl.log" >&2; rm -rf "$tmp"; die "could not make the test certificates with openssl"
    fi
    rm -f "$tmp/openssl.log"
    rm -rf "$TLS_DIR"
    mv "$tmp" "$TLS_DIR"
    say "made a throwaway CA and a server certificate for 127.0.0.1/localhost in $TLS_DIR"
}

pem_body() { sed '/^-----/d' "$1" | tr -d '\n\r'; }
pem_write() { { echo "-----BEGIN $1-----"; fold -w 64 <<<"$2"; echo "-----END $1-----"; } >"$3"; }

# rabbit_tls_up: add the STOMP TLS listener to the running rabbitmq_stomp (see the header). Prints
# nothing; dies with the node's answer when it cannot.
rabbit_tls_up() {
    local cert key ca expr out state a b c
    tls_material
    # the base64 of a PEM file is its DER (server.key: PKCS#8 "PRIVATE KEY", as openssl req writes it)
    cert=$(pem_body "$TLS_DIR/server.pem"); key=$(pem_body "$TLS_DIR/server.key"); ca=$(pem_body "$TLS_DIR/ca.pem")
    # No dollar signs in the expression: Debian's rabbitmqctl wrapper hands it to sh -c.
    expr=$(tr '\n' ' ' <<EOF
Mod = stompfast_stomp_tls,
case code:is_loaded(Mod) of
  false ->
    Forms = [{attribute, 1, module, Mod}, {attribute, 2, export, [{start_link, 3}]},
             {function, 3, start_link, 3,
              [{clause, 3, [{var, 3, 'R'}, {var, 3, 'T'}, {var, 3, 'O'}], [],
                [{call, 3, {remote, 3, {atom, 3, rabbit_stomp_client_sup}, {atom, 3, start_link}},
                  [{var, 3, 'R'}, {var, 3, 'T'}, {var, 3, 'O'}]}]}]}],
    {ok, Mod, Bin} = compile:forms(Forms, [binary]),
    {module, Mod} = code:load_binary(Mod, "stompfast_stomp_tls.erl", Bin);
  _ -> ok
end,
CertDer = base64:decode(<<"$cert">>),
KeyDer = base64:decode(<<"$key">>),
CaDer = base64:decode(<<"$ca">>),
Sup = rabbit_stomp_sup,
Args = fun(I) -> case supervisor:get_childspec(Sup, I) of
                   {ok, #{start := {tcp_listener_sup, start_link, A}}} -> A;
                   {ok, {_, {tcp_listener_sup, start_link, A}, _, _, _, _}} -> A;
                   _ -> [] end end,
Children = [I || {I, _, _, _} <- supervisor:which_children(Sup)],
Conf = hd([lists:nth(6, A) || I <- Children, A <- [Args(I)], length(A) >= 6, lists:nth(3, A) =:= ranch_tcp]),
{ok, SockOpts} = application:get_env(rabbitmq_stomp, tcp_listen_options),
ok = ssl:start(),
SslOpts = [{cert, CertDer}, {key, {'PrivateKeyInfo', KeyDer}}, {cacerts, [CaDer]},
           {verify, verify_none}, {fail_if_no_peer_cert, false}],
[Addr] = rabbit_networking:tcp_listener_addresses({"$HOST", $RABBIT_TLS_PORT}),
Spec = rabbit_networking:tcp_listener_spec(rabbit_stomp_listener_sup, Addr, SockOpts ++ SslOpts, ranch_ssl,
         Mod, Conf, 'stomp/ssl', 10, 1, "STOMP TLS listener (stompfast tests)"),
Id = case Spec of #{id := SpecId} -> SpecId; _ -> element(1, Spec) end,
case lists:member(Id, Children) of
  false ->
    {ok, _} = supervisor:start_child(Sup, Spec),
    io:format("started~n");
  true ->
    Running = case Args(Id) of A4 when length(A4) >= 4 -> lists:nth(4, A4); _ -> [] end,
    case {proplists:get_value(cert, Running), proplists:get_value(key, Running), proplists:get_value(cacerts, Running)} of
      {CertDer, {'PrivateKeyInfo', KeyDer}, [CaDer]} -> io:format("running~n");
      {C, {'PrivateKeyInfo', K}, [CA | _]} when C =/= CertDer, is_binary(C), is_binary(K), is_binary(CA) ->
        io:format("adopt ~s ~s ~s~n", [base64:encode(CA), base64:encode(C), base64:encode(K)]);
      _ ->
        ok = supervisor:terminate_child(Sup, Id), ok = supervisor:delete_child(Sup, Id),
        {ok, _} = supervisor:start_child(Sup, Spec),
        io:format("replaced~n")
    end
end,
done.
EOF
)
    out=$(ctl -q eval "$expr" 2>&1) || rabbit_fail "could not add the STOMP TLS listener on $HOST:$RABBIT_TLS_PORT: $out"
    read -r state a b c <<<"$out"
    case $state in
        started)  say "added a STOMP TLS listener on $HOST:$RABBIT_TLS_PORT (certificate: $TLS_DIR/server.pem)" ;;
        running|replaced) ;;
        adopt)
            # Another checkout's brokers.sh started it: use its certificate rather than fight over it.
            pem_write CERTIFICATE "$a" "$TLS_DIR/ca.pem" && pem_write CERTIFICATE "$b" "$TLS_DIR/server.pem" \
                && (umask 077 && pem_write "PRIVATE KEY" "$c" "$TLS_DIR/server.key") \
                || die "could not copy the running TLS listener's certificate into $TLS_DIR"
            rm -f "$TLS_DIR/ca.key"
            say "the STOMP TLS listener on $HOST:$RABBIT_TLS_PORT was started elsewhere: adopted its CA and certificate into $TLS_DIR" ;;
        *) rabbit_fail "unexpected answer while adding the STOMP TLS listener: $out" ;;
    esac
}

rabbit_wait_stomp() {
    local deadline=$1 t0=$2
    wait_ready stomp "$RABBIT_PORT" "$deadline" || rabbit_fail "STOMP on $HOST:$RABBIT_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready ws "$RABBIT_WS_PORT" "$deadline" || rabbit_fail "Web-STOMP on $HOST:$RABBIT_WS_PORT/ws not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    rabbit_tls_up
    wait_ready tls "$RABBIT_TLS_PORT" "$deadline" || rabbit_fail "STOMP over TLS on $HOST:$RABBIT_TLS_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    printf 'rabbitmq ready  %s  (web-stomp %s, tls %s)  %ss\n' "$(rabbit_url)" "$(rabbit_ws_url)" "$(rabbit_tls_url)" "$(since "$t0")"
}

rabbit_start() {
    local t0 deadline; t0=$(now); deadline=$(awk -v n="$t0" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    rabbit_ports_check
    rabbit_up "$deadline"
    rabbit_wait_stomp "$deadline" "$t0"
}

rabbit_stop() {
    local t0; t0=$(now)
    command -v rabbitmqctl >/dev/null 2>&1 || { say "RabbitMQ is not installed"; return 0; }
    case $(rabbit_inspect || true) in
        running*) ctl -q stop_app >/dev/null || die "rabbitmqctl stop_app failed"
                  echo "rabbitmq stopped (rabbitmqctl stop_app; node still up)  $(since "$t0")s" ;;
        stopped)  echo "rabbitmq already stopped (app stopped, node up)" ;;
        *)        echo "rabbitmq node is not running" ;;
    esac
}

rabbit_restart() {
    local t0 deadline; t0=$(now); deadline=$(awk -v n="$t0" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    rabbit_ports_check
    command -v rabbitmqctl >/dev/null 2>&1 || apt_install rabbitmq-server
    if ctl -q stop_app >/dev/null 2>&1; then
        ctl -q start_app >/dev/null || rabbit_fail "rabbitmqctl start_app failed"
        # The listener env set by `start` lives in the node and survives stop_app/start_app,
        # so no re-check is needed on this fast path; fall back to the full path otherwise.
        if wait_ready stomp "$RABBIT_PORT" "$(awk -v n="$(now)" 'BEGIN { printf "%.3f", n + 10 }')"; then
            rabbit_wait_stomp "$deadline" "$t0"; return
        fi
    fi
    rabbit_up "$deadline"
    rabbit_wait_stomp "$deadline" "$t0"
}

# rabbit_listeners NAME STOMP_PORT STOMP_URL WS_PORT WS_URL TLS_PORT TLS_URL: one status line's
# probes of a RabbitMQ node's three listeners (no newline); returns 1 if any is not ready.
rabbit_listeners() {
    local name=$1 r=0 msg
    if msg=$(stomp_probe "$2" 3); then
        printf '%s ready      %s' "$name" "$3"
    else
        printf '%s NOT READY  %s: %s' "$name" "$3" "$msg"; r=1
    fi
    if msg=$(ws_probe "$4" 3); then printf '  (web-stomp ready %s)' "$5"
    else printf '  (web-stomp NOT READY: %s)' "$msg"; r=1; fi
    if [ ! -s "$TLS_DIR/ca.pem" ]; then printf '  (tls NOT READY: no %s; run start)' "$TLS_DIR/ca.pem"; r=1
    elif msg=$(tls_probe "$6" 3); then printf '  (tls ready %s)' "$7"
    else printf '  (tls NOT READY: %s)' "$msg"; r=1; fi
    return $r
}

rabbit_status() {
    local state r=0
    if ! command -v rabbitmqctl >/dev/null 2>&1; then echo "rabbitmq NOT READY  (not installed)"; return 1; fi
    rabbit_listeners rabbitmq "$RABBIT_PORT" "$(rabbit_url)" "$RABBIT_WS_PORT" "$(rabbit_ws_url)" \
        "$RABBIT_TLS_PORT" "$(rabbit_tls_url)" || r=1
    state=$(rabbit_inspect || true)
    printf '  [%s]\n' "${state:-node down}"
    return $r
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ 4.x (`rabbitmq4`): Debian forky's rabbitmq-server in the chroot of scripts/forky.sh

# Inside the chroot, for the node and its CLI alike (the chroot's own erlang cookie, epmd, ports).
R4_ENV=(HOME=/var/lib/rabbitmq PATH=/usr/lib/rabbitmq/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
        RABBITMQ_NODENAME="$R4_NODE" ERL_EPMD_PORT="$R4_EPMD_PORT" ERL_EPMD_ADDRESS="$HOST"
        RABBITMQ_DIST_PORT="$R4_DIST_PORT" RABBITMQ_CTL_DIST_PORT_MIN="$R4_CTL_DIST_PORT_MIN"
        RABBITMQ_CTL_DIST_PORT_MAX="$((R4_CTL_DIST_PORT_MIN + 10))" RUNNING_UNDER_SYSTEMD=true)

# r4_in CMD...: CMD inside the chroot as its rabbitmq user, in R4_ENV only.
r4_in() {
    STOMPFAST_FORKY_DIR=$R4_ROOT bash "$FORKY" run /usr/bin/env -i "${R4_ENV[@]}" \
        /usr/bin/setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups "$@"
}
r4_ctl() { r4_in /usr/lib/rabbitmq/bin/rabbitmqctl "$@"; }
r4_installed() { [ -s "$R4_ROOT/etc/stompfast-forky" ] && [ -x "$R4_ROOT/usr/lib/rabbitmq/bin/rabbitmqctl" ]; }

# r4_config: write the node's rabbitmq.conf and enabled_plugins into the chroot's /etc/rabbitmq and
# copy the TLS material there; sets R4_CONFIG_CHANGED=1 when any of it differs from what was there
# (the node reads it at boot only: a running node then needs a restart).
R4_CONFIG_CHANGED=0
r4_config() {
    local etc=$R4_ROOT/etc/rabbitmq conf plugins owner f deny=""
    owner=$(awk -F: '$1 == "rabbitmq" { print $3 ":" $4 }' "$R4_ROOT/etc/passwd")
    [ -n "$owner" ] || die "no rabbitmq user in $R4_ROOT/etc/passwd"
    tls_material
    [ "$R4_DENY_TRANSIENT_NONEXCL" = 1 ] && deny="
# STOMPFAST_RABBITMQ4_DENY_TRANSIENT_NONEXCL=1: a non-durable, non-exclusive queue is refused
deprecated_features.permit.transient_nonexcl_queues = false"
    conf="# Written by scripts/brokers.sh on every \`start rabbitmq4\`; edit the script, not this file.
listeners.tcp.1 = $HOST:$R4_AMQP_PORT
distribution.listener.interface = $HOST
loopback_users.guest = true
stomp.listeners.tcp.1 = $HOST:$R4_PORT
stomp.listeners.ssl.1 = $HOST:$R4_TLS_PORT
web_stomp.tcp.ip = $HOST
web_stomp.tcp.port = $R4_WS_PORT
ssl_options.cacertfile = /etc/rabbitmq/stompfast-tls/ca.pem
ssl_options.certfile = /etc/rabbitmq/stompfast-tls/server.pem
ssl_options.keyfile = /etc/rabbitmq/stompfast-tls/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false$deny"
    plugins="[rabbitmq_stomp,rabbitmq_web_stomp]."
    mkdir -p "$etc/stompfast-tls"
    if [ "$(cat "$etc/rabbitmq.conf" 2>/dev/null)" != "$conf" ]; then
        printf '%s\n' "$conf" >"$etc/rabbitmq.conf.tmp" && mv -f "$etc/rabbitmq.conf.tmp" "$etc/rabbitmq.conf"
        R4_CONFIG_CHANGED=1
    fi
    if [ "$(cat "$etc/enabled_plugins" 2>/dev/null)" != "$plugins" ]; then
        printf '%s\n' "$plugins" >"$etc/enabled_plugins"; R4_CONFIG_CHANGED=1
    fi
    for f in ca.pem server.pem server.key; do
        if ! cmp -s "$TLS_DIR/$f" "$etc/stompfast-tls/$f"; then
            install -m 600 -o "${owner%:*}" -g "${owner#*:}" "$TLS_DIR/$f" "$etc/stompfast-tls/$f"
            R4_CONFIG_CHANGED=1
        fi
    done
    chown "$owner" "$etc/stompfast-tls" "$etc/enabled_plugins"
}

# The pid of the node's beam.smp: the RabbitMQ node whose root directory is the chroot (the node
# name is not on its command line: the 4.x node takes it from RABBITMQ_NODENAME at boot). Nothing
# if it is down.
r4_pid() {
    local p cmd
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$R4_ROOT" ] || continue
        cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
        if [[ $cmd == *beam.smp*" -s rabbit boot "* ]]; then echo "${p#/proc/}"; return; fi
    done
}

r4_log_tail() { tail_logs "${1:-30}" "$R4_LOG_DIR/$R4_NODE.log" "$R4_STARTUP_LOG"; }

r4_fail() { say "RabbitMQ 4: $*"; r4_log_tail 40; die "RabbitMQ 4 is not ready: $*"; }

r4_start_node() {
    say "RabbitMQ 4 node $R4_NODE is down: starting it in $R4_ROOT (log $R4_LOG_DIR/$R4_NODE.log)"
    mkdir -p "$R4_LOG_DIR"
    if [ -f "$R4_STARTUP_LOG" ] && [ "$(stat -c %s "$R4_STARTUP_LOG")" -gt 10000000 ]; then
        mv -f "$R4_STARTUP_LOG" "$R4_STARTUP_LOG.1"
    fi
    printf '\n===== %s brokers.sh: starting %s (stomp %s, web-stomp %s, tls %s, amqp %s)\n' "$(date -u +%FT%TZ)" \
        "$R4_NODE" "$R4_PORT" "$R4_WS_PORT" "$R4_TLS_PORT" "$R4_AMQP_PORT" >>"$R4_STARTUP_LOG"
    # The node holds a file handle per queue while it recovers them at boot (see rabbit_start_node):
    # the soft and hard open-files limits are raised to 65,536 here, as root, and setpriv (no PAM
    # session) keeps them. In the foreground (RUNNING_UNDER_SYSTEMD: rabbitmq-server execs erl)
    # under setsid, so the background job is the node's beam.smp itself.
    (
        ulimit -n 65536 2>/dev/null || true
        hard=$(ulimit -Hn)
        if [ "$hard" != unlimited ] && [ "$hard" -lt 4096 ]; then
            say "open-files hard limit is $hard: a node holding more queues than that stays booting"
        fi
        cd / && exec setsid env STOMPFAST_FORKY_DIR="$R4_ROOT" bash "$FORKY" run /usr/bin/env -i "${R4_ENV[@]}" \
            /usr/bin/setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
            /usr/lib/rabbitmq/bin/rabbitmq-server >>"$R4_STARTUP_LOG" 2>&1 </dev/null 9>&-
    ) &
    R4_STARTED_PID=$!
}

R4_STARTED_PID=""
r4_alive() { [ -z "$R4_STARTED_PID" ] || kill -0 "$R4_STARTED_PID" 2>/dev/null; }

# r4_shutdown: stop the whole node (rabbitmqctl shutdown; SIGTERM, then SIGKILL, if that fails).
r4_shutdown() {
    local pid i
    pid=$(r4_pid)
    [ -n "$pid" ] || return 0
    R4=1 ctl -q shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 600; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    say "RabbitMQ 4 node (pid $pid) still up 60 s after shutdown: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# r4_up DEADLINE: chroot, config, node running, rabbit app running (the listeners come from the config).
r4_up() {
    local deadline=$1 state="" started=0 out
    rabbit_ports_check
    if r4_installed; then  # usually "nothing to do": said only when it did something
        out=$(STOMPFAST_FORKY_DIR=$R4_ROOT bash "$FORKY" ensure 2>&1 9>&-) \
            || { printf '%s\n' "$out" >&2; die "scripts/forky.sh ensure failed"; }
        [[ $out == *"(nothing to do"* ]] || printf '%s\n' "$out" >&2
    else
        say "no RabbitMQ 4 chroot at $R4_ROOT yet: scripts/forky.sh ensure (about 45 s)"
        STOMPFAST_FORKY_DIR=$R4_ROOT bash "$FORKY" ensure 9>&- || die "scripts/forky.sh ensure failed"
    fi
    r4_installed || die "no rabbitmq-server in the chroot $R4_ROOT"
    r4_config
    if [ "$R4_CONFIG_CHANGED" = 1 ] && [ -n "$(r4_pid)" ]; then
        say "RabbitMQ 4 settings changed: restarting the node $R4_NODE"
        r4_shutdown
    fi
    while :; do
        state=$(R4=1 rabbit_inspect || true)
        case $state in
            running*) break ;;
            stopped)
                say "RabbitMQ 4 app is stopped: rabbitmqctl start_app"
                R4=1 ctl -q start_app >/dev/null || r4_fail "rabbitmqctl start_app failed" ;;
            booting*)
                sleep 0.5 ;;
            *)
                if [ $started = 0 ] && [ -z "$(r4_pid)" ]; then r4_start_node; started=1; fi
                r4_alive || r4_fail "the node exited while starting"
                sleep 1 ;;
        esac
        awk -v d="$deadline" -v n="$(now)" 'BEGIN { exit !(n < d) }' \
            || r4_fail "node not running after ${TIMEOUT}s (last state: ${state:-node down})"
    done
}

r4_wait_stomp() {
    local deadline=$1 t0=$2
    wait_ready stomp "$R4_PORT" "$deadline" || r4_fail "STOMP on $HOST:$R4_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready ws "$R4_WS_PORT" "$deadline" || r4_fail "Web-STOMP on $HOST:$R4_WS_PORT/ws not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready tls "$R4_TLS_PORT" "$deadline" || r4_fail "STOMP over TLS on $HOST:$R4_TLS_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    printf 'rabbitmq4 ready  %s  (web-stomp %s, tls %s)  %ss\n' "$(r4_url)" "$(r4_ws_url)" "$(r4_tls_url)" "$(since "$t0")"
}

r4_start() {
    local t0 deadline; t0=$(now); deadline=$(awk -v n="$t0" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    r4_up "$deadline"
    r4_wait_stomp "$deadline" "$t0"
}

r4_stop() {
    local t0; t0=$(now)
    r4_installed || { say "RabbitMQ 4 is not installed (no chroot at $R4_ROOT)"; return 0; }
    case $(R4=1 rabbit_inspect || true) in
        running*) R4=1 ctl -q stop_app >/dev/null || die "rabbitmqctl stop_app failed (rabbitmq4)"
                  echo "rabbitmq4 stopped (rabbitmqctl stop_app; node still up)  $(since "$t0")s" ;;
        stopped)  echo "rabbitmq4 already stopped (app stopped, node up)" ;;
        *)        echo "rabbitmq4 node is not running" ;;
    esac
}

r4_restart() {
    local t0 deadline; t0=$(now); deadline=$(awk -v n="$t0" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    rabbit_ports_check
    if r4_installed && [ -n "$(r4_pid)" ]; then
        r4_config
        if [ "$R4_CONFIG_CHANGED" = 1 ]; then
            say "RabbitMQ 4 settings changed: restarting the node $R4_NODE"
            r4_shutdown
        elif R4=1 ctl -q stop_app >/dev/null 2>&1; then
            R4=1 ctl -q start_app >/dev/null || r4_fail "rabbitmqctl start_app failed"
        fi
    fi
    r4_up "$deadline"
    r4_wait_stomp "$deadline" "$t0"
}

r4_status() {
    local state r=0
    if ! r4_installed; then echo "rabbitmq4 NOT READY  (not installed: no chroot at $R4_ROOT; run start rabbitmq4)"; return 1; fi
    rabbit_listeners rabbitmq4 "$R4_PORT" "$(r4_url)" "$R4_WS_PORT" "$(r4_ws_url)" "$R4_TLS_PORT" "$(r4_tls_url)" || r=1
    state=$(R4=1 rabbit_inspect || true)
    printf '  [%s]\n' "${state:-node down}"
    return $r
}

# ---------------------------------------------------------------------------------------------
# ActiveMQ

amq_write_config() {
    mkdir -p "$AMQ_CONF" "$AMQ_DATA" "$AMQ_DIR/tmp"
    cat >"$AMQ_XML" <<EOF
<!-- Written by scripts/brokers.sh on every start; edit the script, not this file. -->
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
                           http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="stompfast"
          persistent="false" useJmx="false" dataDirectory="$AMQ_DATA">
    <!-- Messages held in memory are bounded well below the heap: past it the broker slows
         producers (flow control) or spools to its temp store, instead of dying of
         OutOfMemoryError (seen with 1 GiB of heap and the default limit). -->
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage percentOfJvmHeap="50"/></memoryUsage>
        <tempUsage><tempUsage limit="4 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://$HOST:$AMQ_PORT?wireFormat.maxFrameSize=104857600"/>
      <transportConnector name="stomp+nio" uri="stomp+nio://$HOST:$AMQ_NIO_PORT?wireFormat.maxFrameSize=104857600"/>
    </transportConnectors>
  </broker>
</beans>
EOF
    # Debian's ActiveMQ logs through log4j 1.2 (its log4j2.properties is unused): log to stdout,
    # which goes to $AMQ_LOG.
    cat >"$AMQ_CONF/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, out
log4j.logger.org.apache.activemq.spring=WARN
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{ISO8601} | %-5p | %m | %c | %t%n
EOF
}

# The pid of the ActiveMQ this script started: the pid file, or (if .brokers/ was wiped while it
# ran) the java process whose command line names our config file. Prints nothing if none.
amq_pid() {
    local pid cmd p
    if [ -r "$AMQ_PIDFILE" ]; then
        pid=$(cat "$AMQ_PIDFILE" 2>/dev/null || true)
        if [ -n "$pid" ] && cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) \
           && [[ $cmd == *"xbean:file:$AMQ_XML"* ]]; then
            echo "$pid"; return
        fi
    fi
    for p in /proc/[0-9]*; do
        cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
        if [[ $cmd == *java*"xbean:file:$AMQ_XML"* ]]; then echo "${p#/proc/}"; return; fi
    done
}

AMQ_RUNNING_PID=""
amq_alive() { [ -n "$AMQ_RUNNING_PID" ] && kill -0 "$AMQ_RUNNING_PID" 2>/dev/null; }

amq_log_tail() {
    [ -s "$AMQ_LOG" ] || return 0
    echo "----- tail of $AMQ_LOG" >&2
    tail -n "${1:-30}" "$AMQ_LOG" >&2
}

amq_fail() { say "ActiveMQ: $*"; amq_log_tail 40; die "ActiveMQ is not ready: $*"; }

amq_start() {
    local t0 deadline pid java reason
    t0=$(now); deadline=$(awk -v n="$t0" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    pid=$(amq_pid)
    if [ -z "$pid" ]; then
        apt_install activemq
        [ -r "$AMQ_JAR" ] || die "$AMQ_JAR is missing although the activemq package is installed"
        java=$(command -v java) || die "java is not on PATH (the activemq package should have pulled it in)"
        # A broker another checkout of this repository started (same ports, its own
        # .brokers/) is reused rather than fought over: what the tests need is a STOMP
        # broker that answers on these ports.
        if stomp_probe "$AMQ_PORT" 2 >/dev/null && stomp_probe "$AMQ_NIO_PORT" 2 >/dev/null; then
            printf 'activemq ready  %s  (stomp+nio %s, not started by this script: reused)  %ss\n' \
                "$(amq_url)" "$(amq_nio_url)" "$(since "$t0")"
            return 0
        fi
        # Half a broker (STOMP on one port only) is neither reused nor fought over:
        # `status` calls it NOT READY with the same words.
        if reason=$(amq_one_port ""); then die "$reason"; fi
        for port in "$AMQ_PORT" "$AMQ_NIO_PORT"; do
            if ! reason=$(stomp_probe "$port" 2) && [[ $reason != "TCP connect failed"* ]]; then
                die "$HOST:$port is already in use ($reason); set STOMPFAST_ACTIVEMQ_PORT/STOMPFAST_ACTIVEMQ_NIO_PORT"
            fi
        done
        amq_write_config
        if [ -f "$AMQ_LOG" ] && [ "$(stat -c %s "$AMQ_LOG")" -gt 10000000 ]; then mv -f "$AMQ_LOG" "$AMQ_LOG.1"; fi
        printf '\n===== %s brokers.sh: starting ActiveMQ (stomp %s, stomp+nio %s)\n' \
            "$(date -u +%FT%TZ)" "$AMQ_PORT" "$AMQ_NIO_PORT" >>"$AMQ_LOG"
        # The flags Debian's /usr/bin/activemq passes on Java > 8, then its -Dactivemq.* properties.
        # setsid: own session, so a developer's Ctrl-C in the calling shell does not reach it.
        # shellcheck disable=SC2086
        (cd "$AMQ_DIR" && exec setsid "$java" $AMQ_JAVA_OPTS \
            --add-reads=java.xml=java.logging \
            --add-opens java.base/java.security=ALL-UNNAMED \
            --add-opens java.base/java.net=ALL-UNNAMED \
            --add-opens java.base/java.lang=ALL-UNNAMED \
            --add-opens java.base/java.util=ALL-UNNAMED \
            --add-opens java.naming/javax.naming.spi=ALL-UNNAMED \
            --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED \
            --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
            --add-opens java.base/java.util.concurrent.atomic=ALL-UNNAMED \
            --add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED \
            --add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED \
            --add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED \
            --add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED \
            --add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED \
            -Djava.awt.headless=true \
            -Djava.io.tmpdir="$AMQ_DIR/tmp" \
            -Dlog4j.configuration="file:$AMQ_CONF/log4j.properties" \
            -Dactivemq.classpath="$AMQ_CONF" \
            -Dactivemq.home="$AMQ_HOME" \
            -Dactivemq.base="$AMQ_DIR" \
            -Dactivemq.conf="$AMQ_CONF" \
            -Dactivemq.data="$AMQ_DATA" \
            -jar "$AMQ_JAR" start "xbean:file:$AMQ_XML" \
            >>"$AMQ_LOG" 2>&1 </dev/null 9>&-) &
        pid=$!
        echo "$pid" >"$AMQ_PIDFILE"
        say "ActiveMQ starting (pid $pid, log $AMQ_LOG)"
    elif [ "$(cat "$AMQ_PIDFILE" 2>/dev/null || true)" != "$pid" ]; then
        mkdir -p "$AMQ_DIR" && echo "$pid" >"$AMQ_PIDFILE"   # found by its command line
    fi
    AMQ_RUNNING_PID=$pid
    wait_ready stomp "$AMQ_PORT" "$deadline" amq_alive || amq_fail "STOMP on $HOST:$AMQ_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready stomp "$AMQ_NIO_PORT" "$deadline" amq_alive || amq_fail "stomp+nio on $HOST:$AMQ_NIO_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    printf 'activemq ready  %s  (stomp+nio %s, pid %s)  %ss\n' "$(amq_url)" "$(amq_nio_url)" "$pid" "$(since "$t0")"
}

amq_stop() {
    local t0 pid i
    t0=$(now); pid=$(amq_pid)
    if [ -z "$pid" ]; then
        rm -f "$AMQ_PIDFILE"; echo "activemq not running (none started by this script)"; return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < AMQ_STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "ActiveMQ (pid $pid) ignored SIGTERM for ${AMQ_STOP_TIMEOUT}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$AMQ_PIDFILE"
    echo "activemq stopped (pid $pid)  $(since "$t0")s"
}

# half_broker NAME DISPLAY PID PORT1 PORT2: when STOMP answers on exactly one of a broker's two
# ports, print why that is not a usable broker (the words `start` dies with and `status` shows)
# and succeed; else fail. PID is the instance this script started, if any (then it may still be
# opening the other port). NAME is the script's name for the broker (activemq, artemis).
half_broker() {
    local name=$1 display=$2 pid=$3 p1=$4 p2=$5 up="" down="" reason vars
    if stomp_probe "$p1" 2 >/dev/null; then up=$p1; else down=$p1; fi
    if reason=$(stomp_probe "$p2" 2); then up+=${up:+ }$p2
    else down+=${down:+ }$p2; fi
    [ -n "$up" ] && [ -n "$down" ] || return 1
    [ "$down" = "$p2" ] || reason=$(stomp_probe "$down" 2 || true)
    case $name in
        activemq) vars=STOMPFAST_ACTIVEMQ_PORT/STOMPFAST_ACTIVEMQ_NIO_PORT ;;
        *)        vars=STOMPFAST_ARTEMIS_PORT/STOMPFAST_ARTEMIS_PREFIX_PORT ;;
    esac
    if [ -n "$pid" ]; then
        echo "STOMP answers on $HOST:$up but not on $HOST:$down ($reason): the $display this script started (pid $pid) is still opening it, or lost it (see: $0 logs $name)"
    else
        echo "something not started by this script answers STOMP on $HOST:$up but not on $HOST:$down ($reason): half a broker is not reused (the tests need both ports); stop it or set $vars"
    fi
}

# amq_one_port PID: half_broker for ActiveMQ's two ports.
amq_one_port() { half_broker activemq ActiveMQ "$1" "$AMQ_PORT" "$AMQ_NIO_PORT"; }

amq_status() {
    local pid msg nio_msg r=0 own
    pid=$(amq_pid)
    own=${pid:+pid $pid}
    if msg=$(amq_one_port "$pid"); then
        printf 'activemq NOT READY  %s: %s' "$(amq_url)" "$msg"; r=1
    else
        if msg=$(stomp_probe "$AMQ_PORT" 3); then
            printf 'activemq ready      %s' "$(amq_url)"
        else
            printf 'activemq NOT READY  %s: %s' "$(amq_url)" "$msg"; r=1
        fi
        if nio_msg=$(stomp_probe "$AMQ_NIO_PORT" 3); then printf '  (stomp+nio ready %s)' "$(amq_nio_url)"
        else printf '  (stomp+nio NOT READY: %s)' "$nio_msg"; r=1; fi
    fi
    printf '  [%s]\n' "${own:-not started by this script}"
    return $r
}

# ---------------------------------------------------------------------------------------------
# Artemis

# What `artemis create` is given (recorded in the instance; another set, or another version,
# makes `start` create the instance again). The acceptors are rewritten on every start.
ART_CREATE_ARGS=(--silent --force --name stompfast --host "$HOST" --user guest --password guest
                 --allow-anonymous --role amq --no-web --no-amqp-acceptor --no-hornetq-acceptor
                 --no-mqtt-acceptor --disable-persistence --no-autotune --java-memory 512M)

# Rewrites etc/broker.xml from etc/broker.xml.created (what `artemis create` wrote): its
# <acceptors> become two STOMP acceptors on loopback, the stock one (the "stomp" acceptor line of
# `artemis create`, only host and port changed) and a copy with the /queue/ and /topic/ prefixes.
ART_XML_EDIT='
import os, re, sys
src, dst, host, port, prefix_port, global_max = sys.argv[1:7]
with open(src, encoding="utf-8") as f:
    xml = f.read()
m = re.search(r"<acceptor name=\"stomp\">tcp://[^<?]*\?([^<]*)</acceptor>", xml)
if not m or "protocols=STOMP" not in m.group(1).split(";"):
    print("no stock STOMP acceptor (protocols=STOMP) in %s" % src); sys.exit(1)
params = m.group(1)
acceptors = """<acceptors>
         <!-- Written by scripts/brokers.sh on every start from broker.xml.created (what artemis
              create wrote); edit the script, not this file. The stock STOMP acceptor, and the same
              with the /queue/ and /topic/ prefixes. Nothing else listens. -->
         <acceptor name="stomp">tcp://%s:%s?%s</acceptor>
         <acceptor name="stomp-prefixed">tcp://%s:%s?%s;anycastPrefix=/queue/;multicastPrefix=/topic/</acceptor>
      </acceptors>""" % (host, port, params, host, prefix_port, params)
xml, n = re.subn(r"<acceptors>.*?</acceptors>", lambda _: acceptors, xml, count=1, flags=re.S)
if n != 1:
    print("no <acceptors> element in %s" % src); sys.exit(1)
# Address memory is limited well below the heap: Artemis counts a small STOMP message at far less
# than it holds, so with the default (half the heap) a deep backlog exhausted the heap first.
limit = "<global-max-size>%s</global-max-size>" % global_max
xml, n = re.subn(r"(<persistence-enabled>[^<]*</persistence-enabled>)", lambda m: m.group(1) + "\n      " + limit,
                 xml, count=1)
if n != 1:
    print("no <persistence-enabled> element in %s" % src); sys.exit(1)
with open(dst + ".tmp", "w", encoding="utf-8") as f:
    f.write(xml)
os.replace(dst + ".tmp", dst)
'

# art_fetch: the distribution, unpacked under $ART_DIST (once per version; later starts are offline).
art_fetch() {
    local t0 tmp log=$ART_DIR/fetch.log
    [ -x "$ART_HOME/bin/artemis" ] && return 0
    mkdir -p "$ART_DIST"
    t0=$(now)
    if [ ! -s "$ART_TGZ" ]; then
        command -v mvn >/dev/null 2>&1 || die "Artemis $ART_VERSION is not cached in $ART_DIST and mvn is not on PATH (install Debian's maven, or put $(basename "$ART_TGZ") there)"
        say "fetching org.apache.activemq:apache-artemis:$ART_VERSION:tar.gz:bin with Maven (log: $log)"
        tmp=$(mktemp -d "$ART_DIST/fetch.XXXXXX")
        if ! mvn -q -B dependency:copy "-Dartifact=org.apache.activemq:apache-artemis:$ART_VERSION:tar.gz:bin" \
                "-DoutputDirectory=$tmp" >"$log" 2>&1 </dev/null 9>&- \
           || [ ! -s "$tmp/$(basename "$ART_TGZ")" ]; then
            rm -rf "$tmp"; tail -n 30 "$log" >&2
            die "could not fetch Artemis $ART_VERSION with Maven (full log: $log)"
        fi
        mv "$tmp/$(basename "$ART_TGZ")" "$ART_TGZ"; rm -rf "$tmp"
        say "fetched $(basename "$ART_TGZ") ($(du -h "$ART_TGZ" | cut -f1)) in $(since "$t0") s"
    fi
    tmp=$(mktemp -d "$ART_DIST/unpack.XXXXXX")
    tar -xzf "$ART_TGZ" -C "$tmp" && [ -x "$tmp/apache-artemis-$ART_VERSION/bin/artemis" ] \
        || { rm -rf "$tmp"; die "$ART_TGZ did not unpack to apache-artemis-$ART_VERSION/bin/artemis (delete it to fetch again)"; }
    rm -rf "$ART_HOME"; mv "$tmp/apache-artemis-$ART_VERSION" "$ART_HOME"; rm -rf "$tmp"
}

# art_create: the instance under $ART_INST (again when the version or ART_CREATE_ARGS changed).
art_create() {
    local want t0 out
    want="version=$ART_VERSION args=${ART_CREATE_ARGS[*]} edits=guest-credentialsInvalidate"
    if [ -s "$ART_INST/etc/broker.xml.created" ] && [ "$(cat "$ART_INST/.stompfast-create" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    t0=$(now)
    rm -rf "$ART_INST"
    out=$("$ART_HOME/bin/artemis" create "${ART_CREATE_ARGS[@]}" "$ART_INST" 2>&1 </dev/null 9>&-) \
        || { printf '%s\n' "$out" >&2; die "artemis create failed"; }
    # --allow-anonymous lets the guest module log in ANY failed login too (guest/wrong would be
    # accepted): credentialsInvalidate=true keeps it for logins without a passcode only.
    sed -i 's/^\( *org\.apache\.activemq\.artemis\.spi\.core\.security\.jaas\.GuestLoginModule sufficient\)$/\1\n       credentialsInvalidate=true/' \
        "$ART_INST/etc/login.config"
    grep -q '^ *credentialsInvalidate=true$' "$ART_INST/etc/login.config" \
        || die "could not edit $ART_INST/etc/login.config (no GuestLoginModule line: another Artemis version?)"
    cp "$ART_INST/etc/broker.xml" "$ART_INST/etc/broker.xml.created"
    echo "$want" >"$ART_INST/.stompfast-create"
    say "created the Artemis $ART_VERSION instance $ART_INST in $(since "$t0") s"
}

# The pid of the Artemis this script started: the pid file, or the java process whose command
# line names our instance. Prints nothing if none.
art_pid() {
    local pid cmd p
    if [ -r "$ART_PIDFILE" ]; then
        pid=$(cat "$ART_PIDFILE" 2>/dev/null || true)
        if [ -n "$pid" ] && cmd=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) \
           && [[ $cmd == *"-Dartemis.instance=$ART_INST "* ]]; then
            echo "$pid"; return
        fi
    fi
    for p in /proc/[0-9]*; do
        cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
        if [[ $cmd == *java*"-Dartemis.instance=$ART_INST "* ]]; then echo "${p#/proc/}"; return; fi
    done
}

ART_RUNNING_PID=""
art_alive() { [ -n "$ART_RUNNING_PID" ] && kill -0 "$ART_RUNNING_PID" 2>/dev/null; }

art_log_tail() {
    [ -s "$ART_LOG" ] || return 0
    echo "----- tail of $ART_LOG" >&2
    tail -n "${1:-30}" "$ART_LOG" >&2
}

art_fail() { say "Artemis: $*"; art_log_tail 40; die "Artemis is not ready: $*"; }

art_start() {
    local t0 deadline pid reason port
    t0=$(now)
    pid=$(art_pid)
    if [ -z "$pid" ]; then
        # A broker another checkout started on these ports is reused; half of one is refused.
        if stomp_probe "$ART_PORT" 2 >/dev/null && stomp_probe "$ART_PREFIX_PORT" 2 >/dev/null; then
            printf 'artemis ready  %s  (prefixed %s, not started by this script: reused)  %ss\n' \
                "$(art_url)" "$(art_prefix_url)" "$(since "$t0")"
            return 0
        fi
        if reason=$(half_broker artemis Artemis "" "$ART_PORT" "$ART_PREFIX_PORT"); then die "$reason"; fi
        for port in "$ART_PORT" "$ART_PREFIX_PORT"; do
            if ! reason=$(stomp_probe "$port" 2) && [[ $reason != "TCP connect failed"* ]]; then
                die "$HOST:$port is already in use ($reason); set STOMPFAST_ARTEMIS_PORT/STOMPFAST_ARTEMIS_PREFIX_PORT"
            fi
        done
        command -v java >/dev/null 2>&1 || die "java is not on PATH (Artemis $ART_VERSION needs Java 17 or later)"
        art_fetch
        art_create
        reason=$("$PY" -c "$ART_XML_EDIT" "$ART_INST/etc/broker.xml.created" "$ART_INST/etc/broker.xml" \
                 "$HOST" "$ART_PORT" "$ART_PREFIX_PORT" "$ART_GLOBAL_MAX") || die "could not write $ART_INST/etc/broker.xml: $reason"
        if [ -f "$ART_LOG" ] && [ "$(stat -c %s "$ART_LOG")" -gt 10000000 ]; then mv -f "$ART_LOG" "$ART_LOG.1"; fi
        printf '\n===== %s brokers.sh: starting Artemis %s (stomp %s, prefixed %s)\n' \
            "$(date -u +%FT%TZ)" "$ART_VERSION" "$ART_PORT" "$ART_PREFIX_PORT" >>"$ART_LOG"
        # bin/artemis execs java, so $! is the broker's pid. JAVA_ARGS_APPEND comes after the
        # profile's JAVA_ARGS (-Xms512M -Xmx512M): the last -Xms/-Xmx wins.
        (cd "$ART_INST" && exec setsid env JAVA_ARGS_APPEND="$ART_JAVA_OPTS" "$ART_INST/bin/artemis" run \
            >>"$ART_LOG" 2>&1 </dev/null 9>&-) &
        pid=$!
        echo "$pid" >"$ART_PIDFILE"
        say "Artemis starting (pid $pid, log $ART_LOG)"
    elif [ "$(cat "$ART_PIDFILE" 2>/dev/null || true)" != "$pid" ]; then
        echo "$pid" >"$ART_PIDFILE"   # found by its command line
    fi
    ART_RUNNING_PID=$pid
    deadline=$(awk -v n="$(now)" -v t="$TIMEOUT" 'BEGIN { printf "%.3f", n + t }')
    wait_ready stomp "$ART_PORT" "$deadline" art_alive || art_fail "STOMP on $HOST:$ART_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready stomp "$ART_PREFIX_PORT" "$deadline" art_alive || art_fail "prefixed STOMP on $HOST:$ART_PREFIX_PORT not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    wait_ready art_ws "$ART_PORT" "$deadline" art_alive || art_fail "STOMP over WebSocket on $(art_ws_url) not ready within ${TIMEOUT}s (last attempt: $LAST_REASON)"
    printf 'artemis ready  %s  (prefixed %s, websocket %s, pid %s)  %ss\n' \
        "$(art_url)" "$(art_prefix_url)" "$(art_ws_url)" "$pid" "$(since "$t0")"
}

# art_stop [KILL_AFTER]: SIGTERM, SIGKILL after KILL_AFTER seconds (default STOMPFAST_ARTEMIS_STOP_TIMEOUT).
art_stop() {
    local t0 pid i after=${1:-$ART_STOP_TIMEOUT} how=SIGTERM
    t0=$(now); pid=$(art_pid)
    if [ -z "$pid" ]; then
        rm -f "$ART_PIDFILE"; echo "artemis not running (none started by this script)"; return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < after * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        [ "$after" = 0 ] || say "Artemis (pid $pid) ignored SIGTERM for ${after}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
        how=SIGKILL
    fi
    rm -f "$ART_PIDFILE"
    echo "artemis stopped (pid $pid, $how)  $(since "$t0")s"
}

art_status() {
    local pid msg r=0 own
    pid=$(art_pid)
    own=${pid:+pid $pid}
    if msg=$(half_broker artemis Artemis "$pid" "$ART_PORT" "$ART_PREFIX_PORT"); then
        printf 'artemis NOT READY   %s: %s' "$(art_url)" "$msg"; r=1
    else
        if msg=$(stomp_probe "$ART_PORT" 3); then
            printf 'artemis ready       %s' "$(art_url)"
        else
            printf 'artemis NOT READY   %s: %s' "$(art_url)" "$msg"; r=1
        fi
        if msg=$(stomp_probe "$ART_PREFIX_PORT" 3); then printf '  (prefixed ready %s)' "$(art_prefix_url)"
        else printf '  (prefixed NOT READY: %s)' "$msg"; r=1; fi
        if [ $r = 0 ]; then
            if msg=$(art_ws_probe "$ART_PORT" 3); then printf '  (websocket ready %s)' "$(art_ws_url)"
            else printf '  (websocket NOT READY: %s)' "$msg"; r=1; fi
        fi
    fi
    printf '  [%s]\n' "${own:-not started by this script}"
    return $r
}

# ---------------------------------------------------------------------------------------------

print_env() {
    if [ "${1:-}" = rabbitmq4 ]; then
        cat <<EOF
export STOMPFAST_RABBITMQ_URL=$(r4_url)
export STOMPFAST_RABBITMQ_WS_URL=$(r4_ws_url)
export STOMPFAST_RABBITMQ_TLS_URL=$(r4_tls_url)
export STOMPFAST_RABBITMQ_PORT=$R4_PORT
export STOMPFAST_RABBITMQ_WS_PORT=$R4_WS_PORT
export STOMPFAST_RABBITMQ_TLS_PORT=$R4_TLS_PORT
export STOMPFAST_RABBITMQ_AMQP_PORT=$R4_AMQP_PORT
export STOMPFAST_RABBITMQ_NODE=rabbitmq4
EOF
    else
        cat <<EOF
export STOMPFAST_RABBITMQ_URL=$(rabbit_url)
export STOMPFAST_RABBITMQ_WS_URL=$(rabbit_ws_url)
export STOMPFAST_RABBITMQ_TLS_URL=$(rabbit_tls_url)
export STOMPFAST_RABBITMQ_PORT=$RABBIT_PORT
export STOMPFAST_RABBITMQ_WS_PORT=$RABBIT_WS_PORT
export STOMPFAST_RABBITMQ_TLS_PORT=$RABBIT_TLS_PORT
export STOMPFAST_RABBITMQ_AMQP_PORT=5672
export STOMPFAST_RABBITMQ_NODE=rabbitmq
EOF
    fi
    cat <<EOF
export STOMPFAST_TLS_CA=$TLS_DIR/ca.pem
export STOMPFAST_TLS_BAD_CA=$TLS_DIR/bad-ca.pem
export STOMPFAST_ACTIVEMQ_URL=$(amq_url)
export STOMPFAST_ACTIVEMQ_NIO_URL=$(amq_nio_url)
export STOMPFAST_ARTEMIS_URL=$(art_url)
export STOMPFAST_ARTEMIS_PREFIX_URL=$(art_prefix_url)
export STOMPFAST_ARTEMIS_WS_URL=$(art_ws_url)
export STOMPFAST_BROKERS_SCRIPT=$SCRIPT
EOF
}

# Serialize start/stop/restart (two ActiveMQs or Artemises, or start_app racing stop_app, would be bad).
# Long-lived children (java, the Erlang node, dpkg's daemons) are started with fd 9 closed.
lock() {
    mkdir -p "$BROKERS_DIR"
    exec 9>"$BROKERS_DIR/lock"
    flock -w "$((TIMEOUT + 60))" 9 || die "another brokers.sh holds $BROKERS_DIR/lock"
}

targets() {  # targets WHAT DEFAULT_FOR_ALL...
    case ${1:-all} in
        rabbitmq|rabbitmq4|activemq|artemis) echo "$1" ;;
        *) shift; echo "$*" ;;
    esac
}

cmd=${1:-}
[ $# -gt 0 ] && shift
if [ "$cmd" = rabbitmqctl ]; then
    # rabbitmqctl NODE ARGS...: the node's own CLI (the 4.x node's runs inside its chroot)
    case ${1:-} in
        rabbitmq) shift; exec "${SUDO[@]}" rabbitmqctl "$@" ;;
        rabbitmq4) shift; r4_ctl "$@"; exit $? ;;
        *) die "usage: $0 rabbitmqctl {rabbitmq|rabbitmq4} ARGS..." ;;
    esac
fi
case ${1:-all} in rabbitmq|rabbitmq4|activemq|artemis|all) ;; *) die "unknown broker '$1' (rabbitmq, rabbitmq4, activemq, artemis or all)" ;; esac
[ $# -le 1 ] || die "too many arguments; usage: $0 {start|stop|restart|status|clean|env|logs} [rabbitmq|rabbitmq4|activemq|artemis|all]"
case $cmd in
    start)
        lock
        for b in $(targets "${1:-all}" rabbitmq activemq artemis); do
            case $b in rabbitmq) rabbit_start ;; rabbitmq4) r4_start ;; activemq) amq_start ;; artemis) art_start ;; esac
        done ;;
    stop)
        lock
        for b in $(targets "${1:-all}" activemq artemis); do
            case $b in rabbitmq) rabbit_stop ;; rabbitmq4) r4_stop ;; activemq) amq_stop ;; artemis) art_stop ;; esac
        done
        if [ "${1:-all}" = all ]; then say "RabbitMQ left running (machine-wide service); 'stop rabbitmq' stops its app"; fi ;;
    restart)
        lock
        for b in $(targets "${1:-all}" rabbitmq activemq artemis); do
            case $b in
                rabbitmq) rabbit_restart ;;
                rabbitmq4) r4_restart ;;
                activemq) amq_stop >/dev/null; amq_start ;;
                artemis)  art_stop "$ART_RESTART_KILL_AFTER" >/dev/null; art_start ;;
            esac
        done ;;
    status)
        rc=0
        for b in $(targets "${1:-all}" rabbitmq activemq artemis); do
            case $b in
                rabbitmq) rabbit_status || rc=3 ;; rabbitmq4) r4_status || rc=3 ;;
                activemq) amq_status || rc=3 ;; artemis) art_status || rc=3 ;;
            esac
        done
        exit $rc ;;
    clean)
        for b in $(targets "${1:-all}" rabbitmq); do
            case $b in
                rabbitmq) rabbit_clean ;;
                rabbitmq4) R4=1 rabbit_clean ;;
                *) say "$b: nothing to clean (it keeps no messages or queues across restarts)" ;;
            esac
        done ;;
    env)
        print_env "${1:-}" ;;
    logs)
        case ${1:-all} in
            rabbitmq) rabbit_log_tail 60 ;;
            rabbitmq4) r4_log_tail 60 ;;
            activemq) amq_log_tail 60 ;;
            artemis)  art_log_tail 60 ;;
            *) rabbit_log_tail 30; amq_log_tail 30; art_log_tail 30 ;;
        esac 2>&1 ;;
    -h|--help|help)
        usage ;;
    *)
        usage >&2; exit 2 ;;
esac
