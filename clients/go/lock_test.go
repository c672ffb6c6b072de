package lockbroker

// lock_test.go - locks against the real broker ($LOCKBROKER_URL): acquire
// and release, waiting, cancel by context, shared mode and semaphores,
// reentrancy, goroutines sharing a client, the other ops, auth, the Unix
// socket, and the error codes a real broker can be made to answer.

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t), WithClientName("go-test-client"))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	l, err := c.Lock(ctx, name, TTL(5*time.Second), Wait(0))
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if l.Name() != name || l.Mode() != "exclusive" || l.Fence() <= 0 || l.Count() != 1 ||
		l.TTL() != 5*time.Second || len(l.Token()) < 32 || l.Err() != nil || l.Detached() {
		t.Errorf("lease: name %q mode %q fence %d count %d ttl %v token %q err %v",
			l.Name(), l.Mode(), l.Fence(), l.Count(), l.TTL(), l.Token(), l.Err())
	}
	info, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if info.State != "exclusive" || len(info.Holders) != 1 || info.Fence != l.Fence() ||
		info.Holders[0].Client != "go-test-client" || !strings.HasPrefix(info.Holders[0].Owner, "go-") {
		t.Errorf("Inspect: %+v", info)
	}
	leases, err := c.Leases(ctx)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	found := false
	for _, li := range leases {
		found = found || (li.Token == l.Token() && li.Lock == name && li.Fence == l.Fence() && li.Count == 1)
	}
	if !found {
		t.Errorf("Leases does not list the lease: %+v", leases)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if l.Err() != ErrReleased || l.Context().Err() == nil || l.Count() != 0 {
		t.Errorf("after Release: Err %v, Context %v, Count %d", l.Err(), l.Context().Err(), l.Count())
	}
	select {
	case <-l.Lost():
		t.Errorf("Lost() closed by a release")
	default:
	}
	if err := l.Release(ctx); err != ErrReleased {
		t.Errorf("second Release: %v", err)
	}
	if info, err := c.Inspect(ctx, name); err != nil || info.State != "free" {
		t.Errorf("Inspect after release: %+v, %v", info, err)
	}

	// The next grant of the same lock has a higher fence.
	l2, err := c.Lock(ctx, name, Wait(0))
	if err != nil {
		t.Fatalf("Lock again: %v", err)
	}
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence went from %d to %d", l.Fence(), l2.Fence())
	}
	l2.Release(ctx)
}

func TestWaitTimeoutAndHandoff(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	a, b := dialTest(t, url), dialTest(t, url)
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	la, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, name, Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait(0) on a held lock: %v", err)
	}
	start := time.Now()
	_, err = b.Lock(ctx, name, Wait(200*time.Millisecond))
	if el := time.Since(start); !errors.Is(err, ErrTimeout) || el < 190*time.Millisecond || el > 2*time.Second {
		t.Errorf("Wait(200ms): %v after %v", err, el)
	}
	var se *ServerError
	if !errors.As(err, &se) || se.Code != CodeTimeout || se.Lock != name {
		t.Errorf("timeout as *ServerError: %+v", se)
	}

	// A waiter gets the lock when the holder releases it.
	got := make(chan *Lease, 1)
	go func() {
		l, err := b.Lock(ctx, name, Wait(5*time.Second))
		if err != nil {
			t.Errorf("waiting Lock: %v", err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil || lb.Fence() <= la.Fence() {
			t.Fatalf("handoff lease %+v", lb)
		}
		lb.Release(ctx)
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not granted after the release")
	}
}

func TestCancelByContext(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)
	held, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Lock(wctx, name)
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("Lock returned %v after its context ended", el)
	}
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with an ending context: %v", err)
	}

	// An explicit cancel, from another goroutine.
	cctx, ccancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); ccancel() }()
	if _, err := c.Lock(cctx, name); !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Errorf("Lock cancelled: %v", err)
	}
	if info, err := c.Inspect(ctx, name); err != nil || info.Waiters != 0 {
		t.Errorf("waiters after the cancels: %+v, %v", info, err)
	}
	// The holder is untouched, and the next waiter is served as usual.
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	l, err := c.Lock(ctx, name, Wait(0))
	if err != nil {
		t.Fatalf("Lock after: %v", err)
	}
	l.Release(ctx)
}

func TestSharedAndSemaphore(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	r1, err := c.Lock(ctx, name, Shared(), Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Lock(ctx, name, Shared(), Wait(0))
	if err != nil {
		t.Fatalf("second shared holder: %v", err)
	}
	if r1.Mode() != "shared" || r2.Token() == r1.Token() {
		t.Errorf("shared leases: %q %q", r1.Mode(), r2.Mode())
	}
	if _, err := c.Lock(ctx, name, Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("exclusive beside shared holders: %v", err)
	}
	if info, _ := c.Inspect(ctx, name); info == nil || info.State != "shared" || len(info.Holders) != 2 {
		t.Errorf("Inspect: %+v", info)
	}
	if _, err := c.Lock(ctx, name, Limit(2), Wait(0)); !errors.Is(err, ErrConflict) {
		t.Errorf("semaphore on a shared lock: %v", err)
	}
	r1.Release(ctx)
	r2.Release(ctx)

	sem := lockName(t)
	p1, err := c.Lock(ctx, sem, Limit(2), Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.Lock(ctx, sem, Limit(2), Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	if p1.Mode() != "permit" || p2.Fence() <= p1.Fence() {
		t.Errorf("permits: mode %q fences %d %d", p1.Mode(), p1.Fence(), p2.Fence())
	}
	if _, err := c.Lock(ctx, sem, Limit(2), Wait(100*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("third permit of 2: %v", err)
	}
	if info, _ := c.Inspect(ctx, sem); info == nil || info.State != "semaphore" || info.Limit != 2 {
		t.Errorf("Inspect semaphore: %+v", info)
	}
	if _, err := c.Lock(ctx, sem, Wait(0)); !errors.Is(err, ErrConflict) {
		t.Errorf("exclusive lock on a semaphore: %v", err)
	}
	p1.Release(ctx)
	p3, err := c.Lock(ctx, sem, Limit(2), Wait(time.Second))
	if err != nil {
		t.Fatalf("permit after a release: %v", err)
	}
	p2.Release(ctx)
	p3.Release(ctx)
}

func TestReentryWithOwner(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	l1, err := c.Lock(ctx, name, WithOwner("job-7"))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Lock(ctx, name, WithOwner("job-7"), Wait(0))
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if l2 != l1 || l1.Count() != 2 {
		t.Errorf("re-entry gave lease %p (count %d), first %p", l2, l1.Count(), l1)
	}
	// Without the owner, the same client does not re-enter.
	if _, err := c.Lock(ctx, name, Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("Lock without owner re-entered: %v", err)
	}
	if err := l2.Release(ctx); err != nil || l1.Count() != 1 || l1.Err() != nil {
		t.Errorf("first Release: %v, count %d", err, l1.Count())
	}
	if err := l1.Release(ctx); err != nil || l1.Err() != ErrReleased {
		t.Errorf("last Release: %v, Err %v", err, l1.Err())
	}

	// A shared holder asking exclusive under its own owner would deadlock.
	s, err := c.Lock(ctx, name, Shared(), WithOwner("reader"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, name, WithOwner("reader")); !errors.Is(err, ErrUpgradeUnsupported) {
		t.Errorf("upgrade: %v", err)
	}
	s.Release(ctx)
}

// TestGoroutinesShareClient: goroutines sharing one Client exclude each
// other (each Lock has an owner of its own) and all get their turn.
func TestGoroutinesShareClient(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t)
	const workers, rounds = 8, 10
	var inside, maxInside, total atomic.Int32
	var lastFence atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
					n := inside.Add(1)
					if n > maxInside.Load() {
						maxInside.Store(n)
					}
					if f := lastFence.Load(); l.Fence() <= f {
						t.Errorf("fence %d after %d", l.Fence(), f)
					}
					lastFence.Store(l.Fence())
					time.Sleep(time.Millisecond)
					total.Add(1)
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("WithLock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 || total.Load() != workers*rounds {
		t.Errorf("%d goroutines inside at once (want 1), %d turns (want %d)", maxInside.Load(), total.Load(), workers*rounds)
	}
}

func TestWithLock(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)
	boom := errors.New("boom")
	var held *Lease
	err := c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
		held = l
		if info, _ := c.Inspect(ctx, name); info == nil || info.State != "exclusive" {
			t.Errorf("inside WithLock: %+v", info)
		}
		return boom
	}, TTL(2*time.Second))
	if err != boom {
		t.Errorf("WithLock returned %v, want fn's error", err)
	}
	if held.Err() != ErrReleased {
		t.Errorf("after WithLock: %v", held.Err())
	}
	if _, err := c.Lock(ctx, name, Wait(0)); err != nil {
		t.Errorf("the lock is not free after WithLock: %v", err)
	}
	// A lock it cannot get: Lock's error, fn not called.
	err = c.WithLock(ctx, name, func(context.Context, *Lease) error {
		t.Error("fn called without the lock")
		return nil
	}, Wait(0))
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("WithLock on a held lock: %v", err)
	}
}

func TestExtendAndOtherOps(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	if r, err := c.Ping(ctx); err != nil || r != "up" {
		t.Errorf("Ping: %q, %v", r, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Redis != "up" || st.Sessions < 1 || st.RedisMode != "single" || st.Raw["uptime_s"] == nil {
		t.Errorf("Stats: %+v, %v", st, err)
	}
	if info := c.Info(); info.Proto != 1 || !strings.HasPrefix(info.Server, "lockbroker/") || info.Limits["max_line"] == 0 {
		t.Errorf("Info: %+v", info)
	}

	// A lease without watchdog lives by Extend.
	l, err := c.Lock(ctx, name, TTL(300*time.Millisecond), Watchdog(false), MaxHold(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(150 * time.Millisecond)
		ttl, err := l.Extend(ctx, 300*time.Millisecond)
		if err != nil || ttl != 300*time.Millisecond {
			t.Fatalf("Extend: %v, %v", ttl, err)
		}
	}
	if l.Err() != nil {
		t.Errorf("extended lease: %v", l.Err())
	}
	if ttl, err := c.ExtendToken(ctx, l.Token(), 10*time.Second); err != nil || ttl > 5*time.Second {
		t.Errorf("ExtendToken capped by MaxHold: %v, %v", ttl, err)
	}
	if n, err := c.ReleaseToken(ctx, l.Token()); err != nil || n != 0 || l.Err() != ErrReleased {
		t.Errorf("ReleaseToken of a known lease: %d, %v, Err %v", n, err, l.Err())
	}
	if _, err := l.Extend(ctx, time.Second); err != ErrReleased {
		t.Errorf("Extend after release: %v", err)
	}

	// Do: any op, its answer line.
	raw, err := c.Do(ctx, "ping", nil)
	if err != nil || !strings.Contains(string(raw), `"redis":"up"`) {
		t.Errorf("Do(ping): %s, %v", raw, err)
	}
}

// TestBrokerErrorCodes: the error codes a real broker answers reach the
// caller as their error values (the others: TestFakeEveryErrorCode and the
// tests with brokers of their own).
func TestBrokerErrorCodes(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)
	check := func(what string, err, want error) {
		t.Helper()
		var se *ServerError
		if !errors.Is(err, want) || !errors.As(err, &se) || se.Message == "" {
			t.Errorf("%s: got %v, want %v as a *ServerError", what, err, want)
		}
	}
	_, err := c.Do(ctx, "frobnicate", nil)
	check("unknown op", err, ErrUnknownOp)
	_, err = c.Do(ctx, "inspect", map[string]any{"lock": name, "tll_ms": 5})
	check("unknown field", err, ErrInvalidArgument)
	_, err = c.Lock(ctx, name, TTL(5*time.Millisecond))
	check("TTL 5ms", err, ErrInvalidArgument)
	_, err = c.Lock(ctx, "", Wait(0))
	check("empty name", err, ErrInvalidArgument)
	_, err = c.Lock(ctx, name, Detach(), Watchdog(true))
	check("detach with watchdog", err, ErrInvalidArgument)
	_, err = c.ReleaseToken(ctx, "00000000000000000000000000000000")
	check("release of an unknown lease", err, ErrNotHeld)
	_, err = c.ExtendToken(ctx, "00000000000000000000000000000000", time.Second)
	check("extend of an unknown lease", err, ErrNotHeld)

	l, err := c.Lock(ctx, name, Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock(ctx, name, Wait(0))
	check("held lock", err, ErrTimeout)
	_, err = c.Lock(ctx, name, Limit(3), Wait(0))
	check("semaphore on a lock", err, ErrConflict)
	l.Release(ctx)
	_, err = c.Lock(ctx, name, Shared(), WithOwner("o"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock(ctx, name, WithOwner("o"))
	check("upgrade", err, ErrUpgradeUnsupported)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	url := envOrSkip(t, "LOCKBROKER_AUTH_URL")
	secret := envOrSkip(t, "LOCKBROKER_AUTH_SECRET")
	file := envOrSkip(t, "LOCKBROKER_AUTH_FILE")
	ctx := testCtx(t, 10*time.Second)

	for what, opt := range map[string]Option{"value": WithAuth(secret), "file": WithAuthFile(file)} {
		c := dialTest(t, url, opt)
		l, err := c.Lock(ctx, lockName(t), Wait(0))
		if err != nil {
			t.Errorf("auth by %s: Lock: %v", what, err)
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("auth by %s: Release: %v", what, err)
		}
	}
	// A file with the secret and CRLF counts the same.
	crlf := t.TempDir() + "/secret"
	os.WriteFile(crlf, []byte(secret+"\r\n"), 0o600)
	if c, err := Dial(ctx, url, WithAuthFile(crlf)); err != nil {
		t.Errorf("secret file ending in CRLF: %v", err)
	} else {
		c.Close()
	}
	// A wrong secret fails at Dial.
	c, err := Dial(ctx, url, WithAuth("nope"))
	var se *ServerError
	if !errors.Is(err, ErrUnauthorized) || !errors.As(err, &se) || se.Op != "hello" {
		t.Errorf("wrong secret: Dial: %v", err)
	}
	if c != nil {
		c.Close()
	}
	// No secret: the session opens (as lockctl's): ping works, the rest
	// answers ErrUnauthorized.
	c, err = Dial(ctx, url)
	if err != nil {
		t.Fatalf("no secret: Dial: %v", err)
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("no secret: Ping: %v", err)
	}
	if l, err := c.Lock(ctx, lockName(t), Wait(0)); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("no secret: Lock: %v, want ErrUnauthorized", err)
		if l != nil {
			l.Release(ctx)
		}
	}
	if _, err := Dial(ctx, url, WithAuthFile(t.TempDir()+"/missing")); err == nil {
		t.Errorf("missing auth file: no error")
	}
}

func TestUnixSocket(t *testing.T) {
	t.Parallel()
	url := envOrSkip(t, "LOCKBROKER_UNIX_URL")
	c := dialTest(t, url)
	ctx := testCtx(t, 10*time.Second)
	l, err := c.Lock(ctx, lockName(t), Wait(0))
	if err != nil {
		t.Fatalf("Lock over %s: %v", url, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestDefaultURLDial: Dial("") finds the broker through LOCKBROKER_URL.
func TestDefaultURLDial(t *testing.T) {
	url := brokerURL(t)
	c := dialTest(t, "")
	if c.URL() != url {
		t.Errorf("Dial(\"\") chose %q, LOCKBROKER_URL is %q", c.URL(), url)
	}
}
