// The stompjs contender of bench/compare.py: one scenario, one process.
//
// bench/compare.py (its worker for "stompjs") installs this folder into bench/.build/node
// with `npm ci`, writes the measurement's spec as JSON on this program's standard input
// and reads its standard output: "START" when the timed part begins, "STOP" when it ends
// (the parent reads the broker's and the machine's CPU at both), then one "RESULT {json}".
//
// @stomp/stompjs's Client, used the way its docs teach it on Node.js, over plain TCP:
// `webSocketFactory: () => new TCPWrapper(host, port)` (@stomp/tcp-wrapper's README), so
// it runs on every broker's STOMP port and on the null sink. Options set: connectHeaders
// (login, passcode, host "/" for RabbitMQ's vhost), heartbeatIncoming/Outgoing 0 (as every
// contender: heart-beats off; "Set to 0 to disable") and reconnectDelay 0 ("disable automatic
// reconnection": a benchmark must fail, not retry). splitLargeFrames and forceBinaryWSFrames
// keep their defaults (false: the docs reserve them for Spring-style brokers and React
// Native), as does debug (a no-op).
//
// Scenarios (bench/client_compare.py's and bench/compare.py's):
//   1 publish        client.publish() N times, the last with headers {receipt}, until the
//                    receipt (client.watchForReceipt) arrives
//   2 send+receipt   the same receipt round trip for every message, one after the other
//   3 drain auto     client.subscribe(dest, cb) until the Nth message
//   4 drain client   client.subscribe(dest, cb, {ack: 'client-individual', ...}),
//                    message.ack() for each, the last message.ack({receipt}), until the receipt
//   5 latency        a subscription (ack auto, its receipt awaited before the timed part) and
//                    publishes paced at spec.rate, each with x-ts = process.hrtime.bigint()
//
// CPU is process.cpuUsage() (getrusage RUSAGE_SELF: every thread, V8's GC and JIT threads
// included), wall time process.hrtime.bigint() (monotonic).
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const { Client } = require('@stomp/stompjs');
const { TCPWrapper } = require('@stomp/tcp-wrapper');

const BODY_SIZE = 100; // bench/client_compare.py BODY_SIZE

function emit(result) {
  process.stdout.write('RESULT ' + JSON.stringify(result) + '\n');
}

function fail(why) {
  emit({ error: String(why) });
  process.exit(1);
}

// client_compare.make_body: "<tag>:<8-digit i>:" padded with x to 100 bytes
function makeBody(tag, i) {
  const head = `${tag}:${String(i).padStart(8, '0')}:`;
  return head + 'x'.repeat(BODY_SIZE - head.length);
}

function makeBodies(tag, n) {
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = makeBody(tag, i);
  return out;
}

// what the parent verifies against make_bodies: count, distinct, sha256 of the distinct
// bodies sorted and joined (the bodies are ASCII: JavaScript's sort is the bytes' order)
function check(bodies) {
  const distinct = Array.from(new Set(bodies)).sort();
  const h = crypto.createHash('sha256');
  for (const b of distinct) h.update(b, 'utf8');
  return { received: bodies.length, distinct: distinct.length, bodies_sha256: h.digest('hex') };
}

class Window {
  start() {
    if (global.gc) global.gc(); // as the Python workers' gc.collect() before their window
    process.stdout.write('START\n');
    this.r0 = process.resourceUsage();
    this.c0 = process.cpuUsage();
    this.t0 = process.hrtime.bigint();
  }

  stop() {
    const wall = Number(process.hrtime.bigint() - this.t0) / 1e9;
    const cpu = process.cpuUsage(this.c0);
    const r1 = process.resourceUsage();
    process.stdout.write('STOP\n');
    this.result = {
      wall,
      cpu_user: cpu.user / 1e6,
      cpu_sys: cpu.system / 1e6,
      nvcsw: r1.voluntaryContextSwitches - this.r0.voluntaryContextSwitches,
      nivcsw: r1.involuntaryContextSwitches - this.r0.involuntaryContextSwitches,
    };
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function main() {
  const spec = JSON.parse(fs.readFileSync(0, 'utf8'));
  const { scenario, dest, n, tag } = spec;
  const sendHeaders = Object.fromEntries(spec.send_headers); // the broker's routing headers (Artemis)
  const subHeaders = Object.fromEntries(spec.subscribe_headers); // prefetch / window / routing
  const watchdog = setTimeout(
    () => fail(`stompjs: scenario ${scenario} not done within ${spec.timeout} s`),
    spec.timeout * 1000,
  );
  let finished = false;

  const client = new Client({
    webSocketFactory: () => new TCPWrapper(spec.host, spec.port),
    connectHeaders: { login: spec.login, passcode: spec.passcode, host: '/' },
    heartbeatIncoming: 0,
    heartbeatOutgoing: 0,
    reconnectDelay: 0,
    onStompError: frame => fail(`stompjs: ERROR frame: ${frame.headers.message} ${frame.body}`),
    onWebSocketError: event => fail(`stompjs: socket error: ${event && event.message}`),
    onWebSocketClose: () => {
      if (!finished) fail('stompjs: the connection closed');
    },
  });
  const connected = await new Promise(resolve => {
    client.onConnect = resolve;
    client.activate();
  });

  const win = new Window();
  const out = { server: connected.headers.server, library: '@stomp/stompjs 7.5.0 over @stomp/tcp-wrapper 1.0.1',
                runtime: `node ${process.version}` };
  const receipt = id => new Promise(resolve => client.watchForReceipt(id, resolve));

  if (scenario === 1) {
    const bodies = makeBodies(tag, n);
    win.start();
    for (let i = 0; i < n - 1; i++) {
      client.publish({ destination: dest, body: bodies[i], headers: sendHeaders });
    }
    const last = receipt('last');
    client.publish({ destination: dest, body: bodies[n - 1], headers: { ...sendHeaders, receipt: 'last' } });
    await last;
    win.stop();
  } else if (scenario === 2) {
    const bodies = makeBodies(tag, n);
    win.start();
    for (let i = 0; i < n; i++) {
      const id = `r${i}`;
      const done = receipt(id);
      client.publish({ destination: dest, body: bodies[i], headers: { ...sendHeaders, receipt: id } });
      await done;
    }
    win.stop();
  } else if (scenario === 3 || scenario === 4) {
    const clientAck = scenario === 4;
    const got = [];
    let sub;
    win.start();
    await new Promise(resolve => {
      const onMessage = message => {
        got.push(message.body);
        if (clientAck) {
          if (got.length === n) {
            client.watchForReceipt('done', resolve);
            message.ack({ receipt: 'done' });
          } else {
            message.ack();
          }
        } else if (got.length === n) {
          resolve();
        }
      };
      sub = client.subscribe(dest, onMessage, clientAck ? { ack: 'client-individual', ...subHeaders } : subHeaders);
    });
    win.stop();
    sub.unsubscribe();
    Object.assign(out, check(got));
  } else if (scenario === 5) {
    const bodies = makeBodies(tag, n);
    const got = [];
    const lat = [];
    let allIn;
    const received = new Promise(resolve => { allIn = resolve; });
    const subscribed = receipt('sub');
    const sub = client.subscribe(dest, message => {
      lat.push(Number(process.hrtime.bigint() - BigInt(message.headers['x-ts'])));
      got.push(message.body);
      if (got.length === n) allIn();
    }, { ...subHeaders, receipt: 'sub' });
    await subscribed;
    win.start();
    // pacing as compare.py's _paced_async: send what is due, then sleep until the next is due
    const t0 = performance.now();
    let i = 0;
    while (i < n) {
      const due = Math.min(n, Math.floor((performance.now() - t0) / 1000 * spec.rate) + 1);
      for (; i < due; i++) {
        client.publish({ destination: dest, body: bodies[i],
                         headers: { 'x-ts': String(process.hrtime.bigint()), ...sendHeaders } });
      }
      await sleep(Math.max(0, t0 + i / spec.rate * 1000 - performance.now()));
    }
    await received;
    win.stop();
    sub.unsubscribe();
    out.lat_ns = lat;
    Object.assign(out, check(got));
  } else {
    fail(`unknown scenario ${scenario}`);
  }
  Object.assign(out, win.result);
  emit(out);
  finished = true;
  clearTimeout(watchdog);
  await client.deactivate();
  process.exit(0);
}

main().catch(err => fail(`stompjs: ${err && err.stack ? err.stack : err}`));
