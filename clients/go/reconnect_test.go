package lockbroker

// reconnect_test.go - what happens after a connection drops, against
// listeners of the test's own (no broker needed): the backoff between
// failed connects (its schedule, and how many connects a client makes in a
// given time), the reconnect at once after a drop, and that a lease of the
// dropped session never has its token sent again.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBackoffSchedule: the delay after n failed connects in a row is min
// doubled n-1 times, capped at max, with ±20% jitter (WithBackoff's
// documentation), for the defaults and for options given.
func TestBackoffSchedule(t *testing.T) {
	cases := []struct {
		opts   []Option
		lo, hi time.Duration
	}{
		{nil, DefaultBackoffMin, DefaultBackoffMax},
		{[]Option{WithBackoff(10*time.Millisecond, 75*time.Millisecond)}, 10 * time.Millisecond, 75 * time.Millisecond},
		{[]Option{WithBackoff(time.Second, time.Second)}, time.Second, time.Second},
		{[]Option{WithBackoff(0, 0)}, DefaultBackoffMin, DefaultBackoffMax}, // zeros keep the defaults
	}
	for _, tc := range cases {
		c := &Client{opts: defaultClientOptions()}
		for _, o := range tc.opts {
			o(&c.opts)
		}
		if c.opts.backoffMin != tc.lo || c.opts.backoffMax != tc.hi {
			t.Errorf("options %v: backoff %v..%v, want %v..%v", len(tc.opts), c.opts.backoffMin, c.opts.backoffMax, tc.lo, tc.hi)
			continue
		}
		want := tc.lo
		for n := 1; n <= 64; n++ {
			lo := time.Duration(float64(want) * 0.8)
			hi := time.Duration(float64(want) * 1.2)
			seenLow, seenHigh := false, false
			for i := 0; i < 200; i++ {
				d := c.backoff(n)
				if d < lo || d > hi {
					t.Fatalf("backoff %v..%v: after %d failures %v, want in [%v, %v)", tc.lo, tc.hi, n, d, lo, hi)
				}
				seenLow = seenLow || d < want*95/100
				seenHigh = seenHigh || d > want*105/100
			}
			if !seenLow || !seenHigh {
				t.Errorf("backoff %v..%v: after %d failures, 200 delays show no jitter around %v", tc.lo, tc.hi, n, want)
			}
			if want *= 2; want > tc.hi {
				want = tc.hi
			}
		}
	}
}

// maxConnects bounds the connects a client can start within elapsed of its
// first one when every connect fails: each is followed by at least 80% of
// the documented delay (lo, doubling, capped at hi). Load can only make the
// real count lower.
func maxConnects(lo, hi, elapsed time.Duration) int {
	n := 1
	var sum time.Duration
	d := lo
	for {
		sum += time.Duration(float64(d) * 0.79) // 0.8, less a hair for rounding
		if sum > elapsed {
			return n
		}
		n++
		if d *= 2; d > hi {
			d = hi
		}
	}
}

// slamListener serves its first connection as a broker (hello and ping
// answered) until drop closes it, and accepts every later one only to close
// it at once: each of those is a connect that fails (hello unanswered).
type slamListener struct {
	ln  net.Listener
	url string

	mu      sync.Mutex
	first   net.Conn
	dropped bool
	later   []time.Time // when each later connection was accepted
}

func startSlamListener(t *testing.T) *slamListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &slamListener{ln: ln, url: "tcp://" + ln.Addr().String()}
	t.Cleanup(func() {
		ln.Close()
		s.drop()
	})
	fake := &fakeBroker{answer: func(req map[string]any, send func(string)) {
		send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, req["id"]))
	}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.first == nil && !s.dropped {
				s.first = conn
				s.mu.Unlock()
				go fake.serve(conn, 1)
				continue
			}
			s.later = append(s.later, time.Now())
			s.mu.Unlock()
			conn.Close()
		}
	}()
	return s
}

// drop closes the first connection; every later one is closed at accept.
func (s *slamListener) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped = true
	if s.first != nil {
		s.first.Close()
	}
}

func (s *slamListener) connects() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.later...)
}

// TestReconnectBackoff: after its session drops, a client whose every
// connect fails (the listener closes each connection at once) and which is
// asked for requests in a tight loop makes no more connects than the
// backoff allows (50ms doubling to 2s by default, WithBackoff's otherwise,
// each delay at least 80% of the nominal one), and still makes them: the
// lower bounds are far below the nominal counts (about 5 in 1.5s with the
// defaults, 40 in 3s with 30ms..60ms) and far above what a schedule without
// its cap or stuck at its maximum would make.
func TestReconnectBackoff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		opts    []Option
		lo, hi  time.Duration
		window  time.Duration
		atLeast int
	}{
		// Nominal connects at about 0, 50, 150, 350, 750 ms: at most 6
		// (the shortest delays), 5 nominal, 1 if the first delay were 2s.
		{"defaults", nil, DefaultBackoffMin, DefaultBackoffMax, 1500 * time.Millisecond, 3},
		// 30ms, 60ms, 60ms...: about 40 in 3s, at most 7 without the cap.
		{"capped", []Option{WithBackoff(30*time.Millisecond, 60*time.Millisecond)},
			30 * time.Millisecond, 60 * time.Millisecond, 3 * time.Second, 12},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSlamListener(t)
			c := dialTest(t, s.url, tc.opts...)
			if _, err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
				t.Fatalf("Ping before the drop: %v", err)
			}

			start := time.Now()
			s.drop()
			deadline := start.Add(tc.window)
			requests := 0
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				_, err := c.Ping(ctx)
				cancel()
				requests++
				if err == nil {
					t.Fatal("Ping succeeded against a listener that closes every connection")
				}
				if !errors.Is(err, ErrDisconnected) && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Ping: %v, want ErrDisconnected or the deadline", err)
				}
			}
			c.Close() // ends the wait for the next connect: none starts after
			connects := s.connects()
			elapsed := time.Since(start)

			var gaps []string
			for i := range connects {
				from := start
				if i > 0 {
					from = connects[i-1]
				}
				gaps = append(gaps, connects[i].Sub(from).Round(time.Millisecond).String())
			}
			if len(gaps) > 40 {
				gaps = append(gaps[:40], "...")
			}
			t.Logf("%d requests, %d connects in %v, gaps %s", requests, len(connects), elapsed.Round(time.Millisecond), strings.Join(gaps, " "))
			if most := maxConnects(tc.lo, tc.hi, elapsed); len(connects) > most {
				t.Errorf("%d connects in %v: backoff %v..%v allows at most %d", len(connects), elapsed, tc.lo, tc.hi, most)
			}
			if len(connects) < tc.atLeast {
				t.Errorf("%d connects in %v: backoff %v..%v, want at least %d", len(connects), elapsed, tc.lo, tc.hi, tc.atLeast)
			}
		})
	}
}

// TestReconnectAfterDropIsImmediate: with a backoff whose shortest delay is
// 16s, a request after a drop still connects at once, drop after drop (the
// backoff is for failed connects only); and, as the control that this would
// show a delay, once a connect has failed the next one waits.
func TestReconnectAfterDropIsImmediate(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(req map[string]any, send func(string)) {
		if req["op"] == "drop" {
			send(closeConn)
			return
		}
		send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, req["id"]))
	})
	c := dialTest(t, f.url, WithBackoff(20*time.Second, 20*time.Second))
	for i := 1; i <= 3; i++ {
		if _, err := c.Do(testCtx(t, 10*time.Second), "drop", nil); !errors.Is(err, ErrDisconnected) {
			t.Fatalf("drop %d: %v, want ErrDisconnected", i, err)
		}
		// Far from any speed limit: a backoff delay would be 16s at least.
		if _, err := c.Ping(testCtx(t, 8*time.Second)); err != nil {
			t.Fatalf("Ping after drop %d: %v (the first connect after a drop must not wait)", i, err)
		}
		if n := f.connections(); n != i+1 {
			t.Fatalf("after drop %d: %d connections, want %d", i, n, i+1)
		}
	}

	// The control: nothing listens any more. The connect after the drop is
	// made at once and fails; the next one waits for the backoff.
	f.ln.Close()
	if _, err := c.Do(testCtx(t, 10*time.Second), "drop", nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("last drop: %v", err)
	}
	if _, err := c.Ping(testCtx(t, 8*time.Second)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Ping with nothing listening: %v, want a failed connect (ErrDisconnected)", err)
	}
	if _, err := c.Ping(testCtx(t, time.Second)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping right after a failed connect: %v, want to wait for the backoff (deadline exceeded)", err)
	}
}

// TestFakeOldTokenNeverSent: a session drops while it holds a lease, one
// more inside WithLock and a detached one; the client connects again. The
// broker (a fake, which keeps every line it receives and would answer any
// release or extend with success) never receives the old leases' tokens:
// Release and Extend return the loss without a round trip, and so does
// WithLock. The detached lease, not bound to the session, is released
// through the new one: the control that the fake sees tokens sent then.
func TestFakeOldTokenNeverSent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seq := 0
	f := startFake(t, func(req map[string]any, send func(string)) {
		id := req["id"]
		switch req["op"] {
		case "acquire":
			mu.Lock()
			seq++
			token := fmt.Sprintf("%032x", 0xfeed0000+seq)
			mu.Unlock()
			send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":%q,"lock":%q,"mode":"exclusive","fence":%d,"ttl_ms":30000,"count":1}`,
				id, token, req["lock"], seq))
		case "release":
			send(fmt.Sprintf(`{"id":%v,"ok":true,"count":0}`, id))
		case "extend":
			send(fmt.Sprintf(`{"id":%v,"ok":true,"ttl_ms":%v}`, id, req["ttl_ms"]))
		case "drop":
			send(closeConn)
		default:
			send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, id))
		}
	})
	c := dialTest(t, f.url, WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)

	held, err := c.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	detached, err := c.Lock(ctx, "detached", Detach())
	if err != nil {
		t.Fatal(err)
	}
	inside := make(chan *Lease, 1)
	reconnected := make(chan struct{})
	withLock := make(chan error, 1)
	go func() {
		withLock <- c.WithLock(ctx, "withlock", func(ctx context.Context, l *Lease) error {
			inside <- l
			<-reconnected
			return nil
		})
	}()
	var inner *Lease
	select {
	case inner = <-inside:
	case <-ctx.Done():
		t.Fatal("WithLock's fn did not run")
	}

	if _, err := c.Do(ctx, "drop", nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("drop: %v", err)
	}
	// Documented order: the session's leases are lost before its pending
	// requests fail.
	for _, l := range []*Lease{held, inner} {
		select {
		case <-l.Lost():
		default:
			t.Errorf("%s: not lost by the time the pending request failed", l.Name())
		}
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after the drop: %v", err)
	}
	if n := f.connections(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	for _, l := range []*Lease{held, inner} {
		var le *LostError
		if err := l.Release(ctx); !errors.As(err, &le) || le.Reason != ReasonDisconnected || err != l.Err() {
			t.Errorf("%s: Release after the reconnect = %v, want the loss (disconnected)", l.Name(), err)
		}
		if _, err := l.Extend(ctx, 5*time.Second); !errors.As(err, &le) || le.Reason != ReasonDisconnected || err != l.Err() {
			t.Errorf("%s: Extend after the reconnect = %v, want the loss (disconnected)", l.Name(), err)
		}
	}
	close(reconnected)
	var le *LostError
	if err := <-withLock; !errors.As(err, &le) || le.Reason != ReasonDisconnected {
		t.Errorf("WithLock = %v, want the loss (disconnected)", err)
	}
	if _, err := detached.Extend(ctx, 5*time.Second); err != nil {
		t.Errorf("detached: Extend through the new session: %v", err)
	}
	if err := detached.Release(ctx); err != nil {
		t.Errorf("detached: Release through the new session: %v", err)
	}
	// The fake answers one connection's lines in order: once this is
	// answered, it has received every line sent before it.
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	detachedSent := 0
	for _, ln := range f.received() {
		for _, l := range []*Lease{held, inner} {
			if strings.Contains(ln.line, l.Token()) {
				t.Errorf("the token of %s (lost with its session) reached the broker on connection %d: %s", l.Name(), ln.conn, ln.line)
			}
		}
		if strings.Contains(ln.line, detached.Token()) {
			if ln.conn != 2 {
				t.Errorf("the detached lease's token on connection %d: %s", ln.conn, ln.line)
			}
			detachedSent++
		}
	}
	if detachedSent != 2 {
		t.Errorf("the detached lease's extend and release: %d lines on the new session, want 2", detachedSent)
	}
}
