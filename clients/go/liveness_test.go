package lockbroker

// liveness_test.go - the client's liveness check (on by default): a frozen
// broker's holder learns of its loss before Redis gives the lock to a
// waiter on another broker; the bound follows the shortest TTL held (it
// shrinks at a grant or an extend, relaxes at a release, and applies from
// the first grant on); an idle session is not pinged; WithLivenessCheck
// (false) sends no ping at all.

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLivenessFrozenBroker is issue 26's scenario: holder A on a broker of
// the test's own, waiter B on the suite's broker, same Redis; A's broker is
// frozen (SIGSTOP). With default options (no keepalive) A must see its
// lease lost within about TTL/3, and before B is granted the lock (which
// happens when the lease runs out in Redis, 2/3 of a TTL or more after the
// freeze): never two holders.
func TestLivenessFrozenBroker(t *testing.T) {
	t.Parallel()
	shared := brokerURL(t)
	b := startBroker(t, "")
	proc := b.cmd.Process
	holder := dialTest(t, b.url) // default options: no keepalive
	waiter := dialTest(t, shared)
	ctx := testCtx(t, 60*time.Second)
	name := lockName(t)
	const ttl = 3 * time.Second

	l, err := holder.Lock(ctx, name, TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		at  time.Time
		err error
	}
	granted := make(chan grant, 1)
	go func() {
		l2, err := waiter.Lock(ctx, name, TTL(ttl), Wait(30*time.Second))
		granted <- grant{time.Now(), err}
		if err == nil {
			l2.Release(ctx)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := waiter.Inspect(ctx, name)
		if err == nil && info.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter did not queue: %+v, %v", info, err)
		}
	}

	// A live broker keeps the lease held: the pings are answered.
	time.Sleep(ttl / 2)
	if err := l.Err(); err != nil {
		t.Fatalf("lost while the broker ran: %v", err)
	}

	// Registered after startBroker's kill, so it runs before it.
	t.Cleanup(func() { proc.Signal(syscall.SIGCONT) })
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stopped := time.Now()

	var lostAt time.Time
	select {
	case <-l.Lost():
		lostAt = time.Now()
	case g := <-granted:
		t.Fatalf("the waiter was answered (%v) %v after the freeze while the holder still believed it held the lock (two holders)",
			g.err, g.at.Sub(stopped))
	case <-time.After(20 * time.Second):
		t.Fatalf("no loss within 20s of freezing the holder's broker (Err %v)", l.Err())
	}
	var le *LostError
	if err := l.Err(); !errors.As(err, &le) || le.Reason != ReasonDisconnected {
		t.Errorf("Err() = %v, want a loss with reason %s", err, ReasonDisconnected)
	}
	if l.Context().Err() == nil {
		t.Errorf("the lease's context is not cancelled")
	}
	var g grant
	select {
	case g = <-granted:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not granted within 20s of the holder's loss")
	}
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	lostAfter, grantAfter := lostAt.Sub(stopped), g.at.Sub(stopped)
	t.Logf("after SIGSTOP: holder lost %v, waiter granted %v (TTL %v)",
		lostAfter.Round(time.Millisecond), grantAfter.Round(time.Millisecond), ttl)
	if !lostAt.Before(g.at) {
		t.Errorf("the holder lost its lease %v after SIGSTOP, not before the waiter's grant (%v)", lostAfter, grantAfter)
	}
	if lostAfter > ttl/3+time.Second {
		t.Errorf("the holder lost its lease %v after SIGSTOP, want about TTL/3 (%v)", lostAfter, ttl/3)
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
}

// livenessFake is a fake broker that grants every acquire with the TTL
// asked (token "tok-ID"), answers release, extend and ping, and answers
// nothing at all once muted. pings counts the pings it received.
type livenessFake struct {
	*fakeBroker
	muted atomic.Bool
}

func startLivenessFake(t *testing.T) *livenessFake {
	f := &livenessFake{}
	f.fakeBroker = startFake(t, func(req map[string]any, send func(string)) {
		if f.muted.Load() {
			return
		}
		id := req["id"]
		switch req["op"] {
		case "acquire":
			ttl, _ := req["ttl_ms"].(float64)
			lock, _ := req["lock"].(string)
			send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":"tok-%v","lock":%q,"mode":"exclusive","fence":%v,"ttl_ms":%v,"count":1}`,
				id, id, lock, id, ttl))
		case "extend":
			send(fmt.Sprintf(`{"id":%v,"ok":true,"ttl_ms":%v}`, id, req["ttl_ms"]))
		case "release":
			send(fmt.Sprintf(`{"id":%v,"ok":true,"count":0}`, id))
		default:
			send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, id))
		}
	})
	return f
}

func (f *livenessFake) pings() int {
	n := 0
	for _, l := range f.received() {
		if strings.Contains(l.line, `"op":"ping"`) {
			n++
		}
	}
	return n
}

// pingsDuring is how many pings the fake receives in the next d.
func (f *livenessFake) pingsDuring(d time.Duration) int {
	before := f.pings()
	time.Sleep(d)
	return f.pings() - before
}

// lostWithin mutes the fake and returns how long lease l took to be lost
// (failing after limit).
func (f *livenessFake) lostWithin(t *testing.T, l *Lease, limit time.Duration) time.Duration {
	t.Helper()
	f.muted.Store(true)
	t0 := time.Now()
	select {
	case <-l.Lost():
	case <-time.After(limit):
		t.Fatalf("no loss within %v of the broker going mute", limit)
	}
	var le *LostError
	if err := l.Err(); !errors.As(err, &le) || le.Reason != ReasonDisconnected {
		t.Errorf("Err() = %v, want reason %s", err, ReasonDisconnected)
	}
	return time.Since(t0)
}

// TestLivenessBoundFollowsShortestTTL: against a fake that goes mute, the
// silence tolerated is a third of the shortest TTL held, capped at
// DefaultLivenessBound; it applies from the first grant on, shrinks with a
// shorter lease or an extend, and relaxes at a release.
func TestLivenessBoundFollowsShortestTTL(t *testing.T) {
	t.Parallel()
	t.Run("first lease at once", func(t *testing.T) {
		t.Parallel()
		f := startLivenessFake(t)
		c := dialTest(t, f.url)
		ctx := testCtx(t, 20*time.Second)
		if n := f.pingsDuring(400 * time.Millisecond); n != 0 {
			t.Errorf("%d pings while no lease was held", n)
		}
		l, err := c.Lock(ctx, "a", TTL(600*time.Millisecond)) // bound 200ms
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("lost while the broker answered: %v", err)
		}
		if d := f.lostWithin(t, l, 10*time.Second); d > 1200*time.Millisecond {
			t.Errorf("lost %v after the broker went mute, with a bound of 200ms", d)
		}
	})
	t.Run("shrinks with a shorter lease", func(t *testing.T) {
		t.Parallel()
		f := startLivenessFake(t)
		c := dialTest(t, f.url)
		ctx := testCtx(t, 20*time.Second)
		long, err := c.Lock(ctx, "long", TTL(30*time.Second)) // bound: the 5s default cap
		if err != nil {
			t.Fatal(err)
		}
		if n := f.pingsDuring(600 * time.Millisecond); n != 0 {
			t.Errorf("%d pings in 600ms with a bound of 5s (one every 1.67s)", n)
		}
		short, err := c.Lock(ctx, "short", TTL(600*time.Millisecond)) // bound 200ms
		if err != nil {
			t.Fatal(err)
		}
		if n := f.pingsDuring(600 * time.Millisecond); n < 3 {
			t.Errorf("%d pings in 600ms with a bound of 200ms (one every 67ms)", n)
		}
		if d := f.lostWithin(t, short, 10*time.Second); d > 1200*time.Millisecond {
			t.Errorf("lost %v after the broker went mute, with a bound of 200ms", d)
		}
		if long.Err() == nil {
			t.Errorf("the session ended but its other lease is not lost")
		}
	})
	t.Run("shrinks with an extend", func(t *testing.T) {
		t.Parallel()
		f := startLivenessFake(t)
		c := dialTest(t, f.url)
		ctx := testCtx(t, 20*time.Second)
		l, err := c.Lock(ctx, "x", TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Extend(ctx, 600*time.Millisecond); err != nil { // bound 200ms
			t.Fatal(err)
		}
		if d := f.lostWithin(t, l, 10*time.Second); d > 1200*time.Millisecond {
			t.Errorf("lost %v after the broker went mute, with a bound of 200ms", d)
		}
	})
	t.Run("relaxes at a release", func(t *testing.T) {
		t.Parallel()
		f := startLivenessFake(t)
		c := dialTest(t, f.url)
		ctx := testCtx(t, 20*time.Second)
		long, err := c.Lock(ctx, "long", TTL(3*time.Second)) // bound 1s
		if err != nil {
			t.Fatal(err)
		}
		short, err := c.Lock(ctx, "short", TTL(300*time.Millisecond)) // bound 100ms
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := short.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := f.pingsDuring(700 * time.Millisecond); n > 3 {
			t.Errorf("%d pings in 700ms after the release, with a bound of 1s (one every 333ms)", n)
		}
		d := f.lostWithin(t, long, 10*time.Second)
		if d < 500*time.Millisecond || d > 2500*time.Millisecond {
			t.Errorf("lost %v after the broker went mute, with a bound of 1s", d)
		}
	})
	t.Run("no pings once nothing is held", func(t *testing.T) {
		t.Parallel()
		f := startLivenessFake(t)
		c := dialTest(t, f.url)
		ctx := testCtx(t, 20*time.Second)
		l, err := c.Lock(ctx, "x", TTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if n := f.pingsDuring(300 * time.Millisecond); n == 0 {
			t.Errorf("no ping in 300ms with a bound of 100ms")
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a ping may have crossed the release
		if n := f.pingsDuring(1000 * time.Millisecond); n != 0 {
			t.Errorf("%d pings in 1s with no lease held", n)
		}
	})
}

// TestLivenessCheckOff: WithLivenessCheck(false) sends no ping, even with
// a short lease held, and a mute broker leaves the lease held.
func TestLivenessCheckOff(t *testing.T) {
	t.Parallel()
	f := startLivenessFake(t)
	c := dialTest(t, f.url, WithLivenessCheck(false))
	ctx := testCtx(t, 20*time.Second)
	l, err := c.Lock(ctx, "x", TTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.pingsDuring(time.Second); n != 0 {
		t.Errorf("%d pings with the liveness check off", n)
	}
	f.muted.Store(true)
	time.Sleep(500 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Errorf("the lease ended with the liveness check off: %v", err)
	}
	for _, line := range f.received() {
		if strings.Contains(line.line, `"keepalive_ms"`) {
			t.Errorf("hello asked for keepalive: %s", line.line)
		}
	}
}
