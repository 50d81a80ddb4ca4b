// The go-stomp contender of bench/compare.py: one scenario, one process.
//
// bench/compare.py (its worker for "go-stomp") builds this program into bench/.build/go,
// writes the measurement's spec as JSON on its standard input and reads its standard
// output: "START" when the timed part begins, "STOP" when it ends (the parent reads the
// broker's and the machine's CPU at both), then one "RESULT {json}" line.
//
// The client is used the way go-stomp's godoc teaches it: stomp.Dial with ConnOpt options,
// conn.Send (stomp.SendOpt.Receipt where a receipt is asked, SendOpt.Header for the
// broker's routing header and x-ts), conn.Subscribe with stomp.AckAuto or
// stomp.AckClientIndividual (SubscribeOpt.Header for prefetch and routing), messages
// from sub.C, conn.Ack(msg) per message, conn.Disconnect().
//
// The scenarios are bench/client_compare.py's and bench/compare.py's:
//
//	1 publish        N SENDs, the last with a receipt, until that RECEIPT
//	2 send+receipt   N SENDs, each with a receipt awaited before the next
//	3 drain auto     SUBSCRIBE ack:auto until the Nth message is received
//	4 drain client   SUBSCRIBE ack:client-individual, conn.Ack(msg) for each message;
//	                 conn.Ack takes no options (no receipt on an ACK), so the time ends
//	                 when conn.Disconnect() returns: it waits for the RECEIPT of the
//	                 DISCONNECT written after the last ACK, which the STOMP spec makes
//	                 the confirmation of every frame before it. (Not sub.Unsubscribe(),
//	                 whose wait for its own RECEIPT can miss the wake-up in v3.1.3 when the
//	                 RECEIPT comes back first, then stalls for its whole timeout: seen on
//	                 the null sink; go-stomp/stomp PR 151 replaced that sync.Cond later.)
//	5 latency        a consumer goroutine (ack:auto) on the same connection, sends paced
//	                 at spec.rate, each with x-ts = this process's monotonic ns clock
//
// CPU is this process's own (getrusage RUSAGE_SELF: every thread, the GC's included),
// wall time the monotonic clock, both read at the window's start and stop.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

const bodySize = 100 // bench/client_compare.py BODY_SIZE

type spec struct {
	Scenario         int         `json:"scenario"`
	Host             string      `json:"host"`
	Port             int         `json:"port"`
	Login            string      `json:"login"`
	Passcode         string      `json:"passcode"`
	Dest             string      `json:"dest"`
	N                int         `json:"n"`
	Tag              string      `json:"tag"`
	Timeout          float64     `json:"timeout"`
	Rate             float64     `json:"rate"`
	SendHeaders      [][2]string `json:"send_headers"`      // the broker's routing headers (Artemis)
	SubscribeHeaders [][2]string `json:"subscribe_headers"` // prefetch / window / routing
}

var epoch = time.Now()

// monoNs is this process's monotonic clock in ns (time.Since reads the monotonic reading).
func monoNs() int64 { return int64(time.Since(epoch)) }

// makeBody is client_compare.make_body: "<tag>:<8-digit i>:" padded with x to 100 bytes.
func makeBody(tag string, i int) []byte {
	head := fmt.Sprintf("%s:%08d:", tag, i)
	return []byte(head + strings.Repeat("x", bodySize-len(head)))
}

func makeBodies(tag string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = makeBody(tag, i)
	}
	return out
}

type window struct {
	t0     time.Time
	r0     syscall.Rusage
	result map[string]any
}

func seconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

func (w *window) start() {
	runtime.GC() // as the Python workers' gc.collect() before their window
	os.Stdout.WriteString("START\n")
	syscall.Getrusage(syscall.RUSAGE_SELF, &w.r0)
	w.t0 = time.Now()
}

func (w *window) stop() {
	wall := time.Since(w.t0).Seconds()
	var r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	os.Stdout.WriteString("STOP\n")
	w.result = map[string]any{
		"wall":     wall,
		"cpu_user": seconds(r1.Utime) - seconds(w.r0.Utime),
		"cpu_sys":  seconds(r1.Stime) - seconds(w.r0.Stime),
		"nvcsw":    r1.Nvcsw - w.r0.Nvcsw,
		"nivcsw":   r1.Nivcsw - w.r0.Nivcsw,
	}
}

// check: what the parent verifies against client_compare.make_bodies (count, distinct,
// and the sha256 of the distinct bodies sorted and joined).
func check(bodies [][]byte) map[string]any {
	set := make(map[string]struct{}, len(bodies))
	for _, b := range bodies {
		set[string(b)] = struct{}{}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		io.WriteString(h, k)
	}
	return map[string]any{"received": len(bodies), "distinct": len(set), "bodies_sha256": hex.EncodeToString(h.Sum(nil))}
}

// msgErr: why sub.C gave no message (closed, or an ERROR frame / connection error).
func msgErr(msg *stomp.Message) error {
	if msg == nil {
		return fmt.Errorf("the subscription's channel closed")
	}
	return msg.Err
}

func emit(result map[string]any) {
	line, err := json.Marshal(result)
	if err != nil {
		line = []byte(`{"error": "json: ` + strings.ReplaceAll(err.Error(), `"`, `'`) + `"}`)
	}
	os.Stdout.Write(append(append([]byte("RESULT "), line...), '\n'))
}

func fail(format string, args ...any) {
	emit(map[string]any{"error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

func main() {
	var s spec
	if err := json.NewDecoder(os.Stdin).Decode(&s); err != nil {
		fail("spec: %v", err)
	}
	timeout := time.Duration(s.Timeout * float64(time.Second))
	time.AfterFunc(timeout, func() { fail("go-stomp: scenario %d not done within %.0f s", s.Scenario, s.Timeout) })

	conn, err := stomp.Dial("tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)),
		stomp.ConnOpt.Login(s.Login, s.Passcode),
		stomp.ConnOpt.Host("/"), // RabbitMQ reads host as the vhost; Dial's default is the address
		stomp.ConnOpt.HeartBeat(0, 0),
		stomp.ConnOpt.RcvReceiptTimeout(timeout),
		stomp.ConnOpt.UnsubscribeReceiptTimeout(timeout))
	if err != nil {
		fail("go-stomp: connect: %v", err)
	}
	var sendOpts, subOpts []func(*frame.Frame) error
	for _, h := range s.SendHeaders {
		sendOpts = append(sendOpts, stomp.SendOpt.Header(h[0], h[1]))
	}
	for _, h := range s.SubscribeHeaders {
		subOpts = append(subOpts, stomp.SubscribeOpt.Header(h[0], h[1]))
	}
	withReceipt := append(append([]func(*frame.Frame) error{}, sendOpts...), stomp.SendOpt.Receipt)

	w := &window{}
	out := map[string]any{"server": conn.Server(), "library": "go-stomp v3.1.3", "runtime": runtime.Version()}
	n, dest := s.N, s.Dest
	switch s.Scenario {
	case 1: // publish
		bodies := makeBodies(s.Tag, n)
		w.start()
		for _, body := range bodies[:n-1] {
			if err := conn.Send(dest, "", body, sendOpts...); err != nil {
				fail("go-stomp: send: %v", err)
			}
		}
		if err := conn.Send(dest, "", bodies[n-1], withReceipt...); err != nil {
			fail("go-stomp: last send: %v", err)
		}
		w.stop()
	case 2: // send+receipt
		bodies := makeBodies(s.Tag, n)
		w.start()
		for _, body := range bodies {
			if err := conn.Send(dest, "", body, withReceipt...); err != nil {
				fail("go-stomp: send with receipt: %v", err)
			}
		}
		w.stop()
	case 3, 4: // drains
		client := s.Scenario == 4
		mode := stomp.AckAuto
		if client {
			mode = stomp.AckClientIndividual
		}
		got := make([][]byte, 0, n)
		w.start()
		sub, err := conn.Subscribe(dest, mode, subOpts...)
		if err != nil {
			fail("go-stomp: subscribe: %v", err)
		}
		for len(got) < n {
			msg := <-sub.C
			if msg == nil || msg.Err != nil {
				fail("go-stomp: after %d messages: %v", len(got), msgErr(msg))
			}
			got = append(got, msg.Body)
			if client {
				if err := conn.Ack(msg); err != nil {
					fail("go-stomp: ack: %v", err)
				}
			}
		}
		if client {
			if err := conn.Disconnect(); err != nil { // waits for its RECEIPT: every ACK before it was handled
				fail("go-stomp: disconnect: %v", err)
			}
		}
		w.stop()
		for k, v := range check(got) {
			out[k] = v
		}
	case 5: // latency
		bodies := makeBodies(s.Tag, n)
		sub, err := conn.Subscribe(dest, stomp.AckAuto, subOpts...)
		if err != nil {
			fail("go-stomp: subscribe: %v", err)
		}
		got := make([][]byte, 0, n)
		lat := make([]int64, 0, n)
		done := make(chan struct{})
		w.start()
		go func() {
			for len(got) < n {
				msg := <-sub.C
				if msg == nil || msg.Err != nil {
					fail("go-stomp: after %d messages: %v", len(got), msgErr(msg))
				}
				ts, _ := strconv.ParseInt(msg.Header.Get("x-ts"), 10, 64)
				lat = append(lat, monoNs()-ts)
				got = append(got, msg.Body)
			}
			close(done)
		}()
		// pacing as compare.py's _paced_sync: send what is due, then sleep until the next is due
		t0 := time.Now()
		for i := 0; i < n; {
			due := int(time.Since(t0).Seconds()*s.Rate) + 1
			if due > n {
				due = n
			}
			for ; i < due; i++ {
				opts := append(sendOpts[:len(sendOpts):len(sendOpts)], stomp.SendOpt.Header("x-ts", strconv.FormatInt(monoNs(), 10)))
				if err := conn.Send(dest, "", bodies[i], opts...); err != nil {
					fail("go-stomp: send: %v", err)
				}
			}
			next := t0.Add(time.Duration(float64(i) / s.Rate * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
		}
		<-done
		w.stop()
		out["lat_ns"] = lat
		for k, v := range check(got) {
			out[k] = v
		}
	default:
		fail("unknown scenario %d", s.Scenario)
	}
	for k, v := range w.result {
		out[k] = v
	}
	emit(out)
	conn.Disconnect() // (a no-op after scenario 4's)
}
