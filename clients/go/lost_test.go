package lockbroker

// lost_test.go - leases lost while held: keys deleted behind the broker's
// back, max_hold, expiry without watchdog, a dropped connection (brokers of
// the test's own, killed and restarted), a broker shutting down, and a
// closed client; also detached leases, which outlive their session.

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// waitLost waits for l.Lost() and checks that the lease is lost for
// reason, its context is cancelled and Release returns the loss.
func waitLost(t *testing.T, l *Lease, reason string, within time.Duration) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(within):
		t.Fatalf("no loss within %v (Err %v)", within, l.Err())
	}
	var le *LostError
	if err := l.Err(); !errors.As(err, &le) || !errors.Is(err, ErrLost) || le.Reason != reason || le.Lock != l.Name() {
		t.Errorf("Err() = %v, want a loss with reason %s", err, reason)
	}
	if l.Context().Err() == nil {
		t.Errorf("the lease's context is not cancelled")
	}
	if err := l.Release(context.Background()); err != l.Err() {
		t.Errorf("Release of a lost lease = %v, want the loss %v", err, l.Err())
	}
	if _, err := l.Extend(context.Background(), time.Second); err != l.Err() {
		t.Errorf("Extend of a lost lease = %v, want the loss", err)
	}
}

// TestLostWhileWorking: the lock's keys vanish from Redis while the holder
// works; the watchdog's next renewal (TTL 600ms: after ~200ms) finds out,
// and the holder hears of it through Lost(), its context and Release.
func TestLostWhileWorking(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)

	name := lockName(t)
	l, err := c.Lock(ctx, name, TTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if n := deleteLockKeys(t, name); n == 0 {
		t.Fatalf("no keys of %q in Redis", name)
	}
	start := time.Now()
	waitLost(t, l, ReasonGone, 3*time.Second)
	t.Logf("lost after %v", time.Since(start))

	// The same through WithLock: fn's context ends, WithLock returns the loss.
	name = lockName(t)
	err = c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
		deleteLockKeys(t, name)
		select {
		case <-ctx.Done():
		case <-time.After(3 * time.Second):
			t.Error("fn's context not cancelled by the loss")
		}
		return ctx.Err() // what fn would typically return
	}, TTL(600*time.Millisecond))
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ReasonGone {
		t.Errorf("WithLock after a loss: %v", err)
	}
	// The lock is free again (the keys are gone).
	if l, err := c.Lock(ctx, name, Wait(0)); err != nil {
		t.Errorf("Lock after the loss: %v", err)
	} else {
		l.Release(ctx)
	}
}

// TestLostReleaseRace: the keys vanish and the holder releases
// at once, before the watchdog noticed: Release says not_held as a loss,
// never success.
func TestLostReleaseRace(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)
	l, err := c.Lock(ctx, name, TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	deleteLockKeys(t, name)
	err = l.Release(ctx)
	var le *LostError
	if !errors.As(err, &le) || !errors.Is(err, ErrLost) {
		t.Fatalf("Release after the keys vanished: %v", err)
	}
	if le.Reason != ReasonGone && le.Reason != ReasonNotHeld {
		t.Errorf("reason %q", le.Reason)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost() not closed")
	}
}

func TestMaxHoldAndExpiry(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	capped, err := c.Lock(ctx, lockName(t), MaxHold(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	expiring, err := c.Lock(ctx, lockName(t), TTL(300*time.Millisecond), Watchdog(false))
	if err != nil {
		t.Fatal(err)
	}
	waitLost(t, capped, ReasonMaxHold, 3*time.Second)
	waitLost(t, expiring, ReasonExpired, 3*time.Second)
}

func TestKeepalive(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t), WithKeepalive(600*time.Millisecond))
	ctx := testCtx(t, 10*time.Second)
	l, err := c.Lock(ctx, lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the pings keep the session alive
	if l.Err() != nil {
		t.Fatalf("lease lost with keepalive: %v", l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if _, err := Dial(ctx, brokerURL(t), WithKeepalive(100*time.Millisecond)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("keepalive 100ms: %v", err)
	}
}

func TestDetachedOutlivesClient(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)
	a, err := Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.Lock(ctx, name, Detach(), TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bound, err := a.Lock(ctx, lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	waitLost(t, bound, ReasonClosed, time.Second)
	if d.Err() != nil || d.Context().Err() != nil {
		t.Errorf("a detached lease ended with its client: %v", d.Err())
	}
	if err := d.Release(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Release through a closed client: %v", err)
	}
	if _, err := a.Lock(ctx, name); !errors.Is(err, ErrClosed) {
		t.Errorf("Lock on a closed client: %v", err)
	}

	b := dialTest(t, url)
	if info, _ := b.Inspect(ctx, name); info == nil || info.State != "exclusive" {
		t.Fatalf("the detached lease is gone: %+v", info)
	}
	if n, err := b.ReleaseToken(ctx, d.Token()); err != nil || n != 0 {
		t.Errorf("ReleaseToken from another client: %d, %v", n, err)
	}
}

// TestDisconnect: a broker of the test's own is killed while a lease is
// held and an acquire waits: the lease is lost ("disconnected"), the acquire
// fails with ErrDisconnected, requests fail while the broker is away, and
// work again once it is back. The old lease's token is never sent again.
func TestDisconnect(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	b := startBroker(t, "")
	c := dialTest(t, b.url, WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	ctx := testCtx(t, 20*time.Second)

	name := lockName(t)
	held, err := c.Lock(ctx, name, TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	detached, err := c.Lock(ctx, lockName(t), Detach(), TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := c.Lock(ctx, name); waiting <- err }()
	time.Sleep(100 * time.Millisecond)

	b.kill()
	waitLost(t, held, ReasonDisconnected, 2*time.Second)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrDisconnected) {
			t.Errorf("waiting Lock: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiting Lock did not fail")
	}
	if detached.Err() != nil {
		t.Errorf("a detached lease was reported lost: %v", detached.Err())
	}
	if _, err := c.Ping(ctx); !errors.Is(err, ErrDisconnected) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Ping with the broker away: %v", err)
	}

	b.start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Ping(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l, err := c.Lock(ctx, lockName(t), Wait(0))
	if err != nil {
		t.Fatalf("Lock after the reconnect: %v", err)
	}
	leases, err := c.Leases(ctx)
	if err != nil || len(leases) != 1 || leases[0].Token != l.Token() {
		t.Errorf("the new session's leases: %+v, %v", leases, err)
	}
	l.Release(ctx)
	if err := held.Release(ctx); err != held.Err() {
		t.Errorf("old lease after the reconnect: %v", err)
	}
	// The detached lease outlived the broker: released through the new session.
	if err := detached.Release(ctx); err != nil {
		t.Errorf("detached lease after the reconnect: %v", err)
	}
}

// TestBrokerLimitsAndShutdown: limit_exceeded, unavailable and
// shutting_down, from brokers started for them.
func TestBrokerLimitsAndShutdown(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	ctx := testCtx(t, 20*time.Second)

	b := startBroker(t, "", "--max-leases-per-session", "1", "--shutdown-grace-ms", "300")
	c := dialTest(t, b.url)
	held, err := c.Lock(ctx, lockName(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock(ctx, lockName(t), Wait(0))
	var se *ServerError
	if !errors.Is(err, ErrLimitExceeded) || !errors.As(err, &se) {
		t.Errorf("second lease with --max-leases-per-session 1: %v", err)
	}

	other := dialTest(t, b.url)
	waiting := make(chan error, 1)
	go func() { _, err := other.Lock(ctx, held.Name()); waiting <- err }()
	time.Sleep(100 * time.Millisecond)
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrShuttingDown) {
			t.Errorf("waiting Lock at shutdown: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Error("the waiting Lock did not end at shutdown")
	}
	waitLost(t, held, ReasonDisconnected, 3*time.Second)

	down := startBroker(t, "redis://127.0.0.1:1")
	d := dialTest(t, down.url)
	if _, err := d.Lock(ctx, lockName(t), Wait(0)); !errors.Is(err, ErrUnavailable) || !errors.As(err, &se) {
		t.Errorf("Lock with Redis away: %v", err)
	}
	if r, err := d.Ping(ctx); err != nil || r != "down" {
		t.Errorf("Ping with Redis away: %q, %v", r, err)
	}
}

// TestKeepaliveFrozenBroker: a broker of the test's own is stopped
// (SIGSTOP: its socket stays open, nothing answers) while a lease is held
// and a request is pending. With keepalive the client finds out by itself:
// the lease is lost ("disconnected") and the request fails with
// ErrDisconnected while the broker is still frozen. The broker is always
// continued (SIGCONT) after, even when the test fails; then the client
// connects again and the lock can be taken again.
func TestKeepaliveFrozenBroker(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	b := startBroker(t, "")
	proc := b.cmd.Process
	c := dialTest(t, b.url, WithKeepalive(time.Second), WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	ctx := testCtx(t, 60*time.Second)
	name := lockName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	// Registered after startBroker's kill, so it runs before it.
	t.Cleanup(func() { proc.Signal(syscall.SIGCONT) })
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	stopped := time.Now()
	pending := make(chan error, 1)
	go func() { _, err := c.Ping(ctx); pending <- err }()

	// Keepalive 1s: a ping every 333ms, unanswered for 1s: about 1.3s.
	select {
	case <-l.Lost():
	case <-time.After(20 * time.Second):
		t.Fatalf("no loss within 20s of freezing the broker, with keepalive 1s (Err %v)", l.Err())
	}
	lostAfter := time.Since(stopped)
	var le *LostError
	if err := l.Err(); !errors.As(err, &le) || le.Reason != ReasonDisconnected {
		t.Errorf("Err() = %v, want a loss with reason %s", err, ReasonDisconnected)
	}
	if l.Context().Err() == nil {
		t.Errorf("the lease's context is not cancelled")
	}
	select {
	case err := <-pending:
		if !errors.Is(err, ErrDisconnected) {
			t.Errorf("Ping pending on the frozen broker: %v, want ErrDisconnected", err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("the Ping pending on the frozen broker did not fail")
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	t.Logf("lost %v after SIGSTOP", lostAfter.Round(time.Millisecond))

	// The broker, continued, ends the dropped session and frees its lease;
	// the client connects again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l2, err := c.Lock(ctx, name, Wait(5*time.Second))
		if err == nil {
			if l2 == l || l2.Token() == l.Token() {
				t.Errorf("the lock after the thaw came back as the lost lease")
			}
			if err := l2.Release(ctx); err != nil {
				t.Errorf("Release after the thaw: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lock after the thaw: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
