package lockbroker

// reentry_test.go - context-scoped reentrancy (scope.go): a Lock with the
// context a lease gave (WithLock's ctx, Lease.Context) re-enters it; any
// other context is an owner of its own; goroutines never re-enter each
// other's locks; a lost scope fails a nested Lock with the loss; semaphores
// and detached leases are exempt; WithOwner wins. Against the real broker
// ($LOCKBROKER_URL), and one test against a fake broker that checks the
// owners on the wire.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holderCount is the count inspect shows for the lock's only holder, or 0
// when it is free.
func holderCount(t *testing.T, c *Client, name string) int {
	t.Helper()
	info, err := c.Inspect(testCtx(t, 5*time.Second), name)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", name, err)
	}
	switch len(info.Holders) {
	case 0:
		return 0
	case 1:
		return info.Holders[0].Count
	}
	t.Fatalf("%s has %d holders: %+v", name, len(info.Holders), info.Holders)
	return 0
}

// TestReentryNestedWithLock: WithLock inside WithLock with fn's ctx
// re-enters (the same lease, Count 2, one holder in the broker) without
// waiting, each level is released on its return, and the lock is free
// after both.
func TestReentryNestedWithLock(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	var outer *Lease
	inner := false
	err := c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
		outer = l
		err := c.WithLock(ctx, name, func(ctx context.Context, l2 *Lease) error {
			inner = true
			if l2 != l || l.Count() != 2 {
				t.Errorf("nested WithLock: lease %p count %d, outer %p", l2, l2.Count(), l)
			}
			if n := holderCount(t, c, name); n != 2 {
				t.Errorf("the broker shows count %d, want 2", n)
			}
			return nil
		}, Wait(0)) // a re-entry never waits
		if err != nil {
			return err
		}
		if l.Count() != 1 || l.Err() != nil || holderCount(t, c, name) != 1 {
			t.Errorf("after the inner WithLock: count %d (broker %d), Err %v", l.Count(), holderCount(t, c, name), l.Err())
		}
		return nil
	}, Wait(0))
	if err != nil || !inner {
		t.Fatalf("WithLock: %v (inner ran: %v)", err, inner)
	}
	if outer.Err() != ErrReleased || outer.Count() != 0 {
		t.Errorf("after both: Err %v, count %d", outer.Err(), outer.Count())
	}
	if n := holderCount(t, c, name); n != 0 {
		t.Errorf("the lock is not free after both levels: count %d", n)
	}
}

// TestReentryLeaseContext: Lock with lease.Context(), or a context derived
// from it, re-enters under the lease's owner; the releases unwind.
func TestReentryLeaseContext(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.Owner(), "go-") {
		t.Errorf("Owner() = %q", l.Owner())
	}
	l2, err := c.Lock(l.Context(), name, Wait(0))
	if err != nil || l2 != l || l.Count() != 2 {
		t.Fatalf("Lock(l.Context()): %v, lease %p count %d, want %p count 2", err, l2, l.Count(), l)
	}
	dctx, cancel := context.WithTimeout(l.Context(), 5*time.Second)
	defer cancel()
	l3, err := c.Lock(dctx, name, Wait(0))
	if err != nil || l3 != l || l.Count() != 3 {
		t.Fatalf("Lock(derived ctx): %v, count %d", err, l.Count())
	}
	info, err := c.Inspect(ctx, name)
	if err != nil || len(info.Holders) != 1 || info.Holders[0].Count != 3 || info.Holders[0].Owner != l.Owner() {
		t.Errorf("inspect: %v %+v", err, info)
	}
	for want := 2; want >= 0; want-- {
		if err := l.Release(ctx); err != nil || l.Count() != want {
			t.Fatalf("Release: %v, count %d, want %d", err, l.Count(), want)
		}
	}
	if l.Err() != ErrReleased || holderCount(t, c, name) != 0 {
		t.Errorf("after three releases: Err %v, broker count %d", l.Err(), holderCount(t, c, name))
	}
}

// TestReentryPlainContextWaits: a context that carries no lease of the lock
// is an owner of the call's own (documented): it waits for the lease its
// own goroutine holds, until Wait. WithOwner wins over the scope.
func TestReentryPlainContextWaits(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	name := lockName(t)

	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Lock(context.Background(), name, Wait(200*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("Lock(context.Background()) while held: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("it gave up after %v: it did not wait", d)
	}
	if _, err := c.Lock(ctx, name, Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("Lock(ctx given to the first Lock): %v, want ErrTimeout", err)
	}
	if _, err := c.Lock(l.Context(), name, WithOwner("someone-else"), Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("WithOwner in the scope: %v, want ErrTimeout (WithOwner wins)", err)
	}
	if l2, err := c.Lock(context.Background(), name, WithOwner(l.Owner()), Wait(0)); err != nil || l2 != l {
		t.Errorf("WithOwner(l.Owner()): %v, lease %p want %p", err, l2, l)
	} else {
		l2.Release(ctx)
	}
	if l.Count() != 1 || holderCount(t, c, name) != 1 {
		t.Errorf("count %d after the waits, want 1", l.Count())
	}
	l.Release(ctx)
}

// TestReentryGoroutinesExclude: goroutines sharing a Client, each with its
// own context, exclude each other even while each re-enters its own lease.
func TestReentryGoroutinesExclude(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t)

	// One holds (re-entered twice); the other, with its own context, waits.
	held := make(chan *Lease)
	done := make(chan struct{})
	go func() {
		err := c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
			return c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
				held <- l
				<-done
				return nil
			})
		})
		if err != nil {
			t.Errorf("holder: %v", err)
		}
		close(held)
	}()
	l := <-held
	if l.Count() != 2 {
		t.Errorf("holder's count %d, want 2", l.Count())
	}
	otherCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Lock(otherCtx, name, Wait(200*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("another goroutine's Lock: %v, want ErrTimeout", err)
	}
	close(done)
	<-held
	l2, err := c.Lock(otherCtx, name, Wait(5*time.Second))
	if err != nil || l2 == l || l2.Owner() == l.Owner() {
		t.Fatalf("after the holder left: %v (same lease: %v)", err, l2 == l)
	}
	l2.Release(ctx)

	// Many goroutines, each re-entering its own lease inside: never two
	// inside at once.
	const workers, rounds = 6, 8
	var inside, maxInside, total atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := c.WithLock(ctx, name, func(ctx context.Context, l *Lease) error {
					return c.WithLock(ctx, name, func(ctx context.Context, l2 *Lease) error {
						n := inside.Add(1)
						if n > maxInside.Load() {
							maxInside.Store(n)
						}
						if l2 != l || l.Count() != 2 {
							t.Errorf("nested: lease %p count %d, want %p count 2", l2, l.Count(), l)
						}
						time.Sleep(time.Millisecond)
						total.Add(1)
						inside.Add(-1)
						return nil
					}, Wait(0))
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

// TestReentryOtherLock: inside a scope, another lock's name is a new lease
// of its own, and the chain keeps the outer scope: inside both, each lock
// re-enters its own lease.
func TestReentryOtherLock(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	a, b := lockName(t)+"-a", lockName(t)+"-b"

	err := c.WithLock(ctx, a, func(ctx context.Context, la *Lease) error {
		return c.WithLock(ctx, b, func(ctx context.Context, lb *Lease) error {
			if lb == la || lb.Name() != b || lb.Count() != 1 || lb.Owner() == la.Owner() {
				t.Errorf("lock %s in %s's scope: lease %p (%s, count %d, owner %q), outer %p (owner %q)",
					b, a, lb, lb.Name(), lb.Count(), lb.Owner(), la, la.Owner())
			}
			for _, sctx := range []context.Context{ctx, lb.Context()} {
				l, err := c.Lock(sctx, a, Wait(0))
				if err != nil || l != la || la.Count() != 2 {
					t.Errorf("%s from inside %s: %v, count %d", a, b, err, la.Count())
				} else {
					l.Release(ctx)
				}
			}
			l, err := c.Lock(ctx, b, Wait(0))
			if err != nil || l != lb || lb.Count() != 2 {
				t.Errorf("%s again: %v, count %d", b, err, lb.Count())
			} else {
				l.Release(ctx)
			}
			return nil
		}, Wait(0))
	}, Wait(0))
	if err != nil {
		t.Fatal(err)
	}
	if holderCount(t, c, a) != 0 || holderCount(t, c, b) != 0 {
		t.Error("a lock is still held after both scopes")
	}
}

// TestReentryLostScope: once the scope's lease is lost, a Lock of that lock
// with the scope's context (no Wait: a fresh wait would block) returns the
// loss at once, and so do WithLock and LockAll; WithLock returns the loss.
func TestReentryLostScope(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 15*time.Second)
	name := lockName(t)

	err := c.WithLock(ctx, name, func(fctx context.Context, l *Lease) error {
		if n := deleteLockKeys(t, name); n == 0 {
			t.Fatalf("no keys of %q in Redis", name)
		}
		select {
		case <-l.Lost():
		case <-time.After(3 * time.Second):
			t.Fatal("the lease was not lost")
		}
		start := time.Now()
		_, errLock := c.Lock(fctx, name)
		_, errCtx := c.Lock(l.Context(), name)
		errWith := c.WithLock(fctx, name, func(context.Context, *Lease) error {
			t.Error("fn ran under a lost scope")
			return nil
		})
		_, errAll := c.LockAll(fctx, []LockSpec{{Lock: name}, {Lock: name + "-other"}})
		if d := time.Since(start); d > time.Second {
			t.Errorf("the nested calls took %v: they waited", d)
		}
		for what, err := range map[string]error{"Lock(fn's ctx)": errLock, "Lock(l.Context())": errCtx,
			"WithLock": errWith, "LockAll": errAll} {
			var le *LostError
			if !errors.As(err, &le) || err != l.Err() {
				t.Errorf("%s under a lost scope: %v, want the loss %v", what, err, l.Err())
			}
		}
		if n := holderCount(t, c, name+"-other"); n != 0 {
			t.Errorf("LockAll kept a lock under a lost scope")
		}
		// Another lock in the lost scope is not the loss's business: fn's
		// ctx is cancelled, so it is ErrCancelled.
		if _, err := c.Lock(fctx, name+"-b"); !errors.Is(err, ErrCancelled) {
			t.Errorf("another lock with the lost scope's cancelled ctx: %v", err)
		}
		return fctx.Err()
	}, TTL(600*time.Millisecond))
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ReasonGone {
		t.Errorf("WithLock: %v, want the loss (gone)", err)
	}
	// The lock is free again: a plain context takes it at once.
	if l, err := c.Lock(ctx, name, Wait(0)); err != nil {
		t.Errorf("Lock after the loss: %v", err)
	} else {
		l.Release(ctx)
	}
}

// TestReentryExemptions: semaphore permits are never re-entered; a detached
// lease (held or asked) is refused at once instead of waiting for itself;
// shared then exclusive is the broker's upgrade_unsupported; exclusive then
// shared re-enters the exclusive lease.
func TestReentryExemptions(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)

	sem := lockName(t)
	err := c.WithLock(ctx, sem, func(ctx context.Context, p1 *Lease) error {
		p2, err := c.Lock(ctx, sem, Limit(2), Wait(0))
		if err != nil {
			return err
		}
		if p2 == p1 || p2.Count() != 1 || p1.Count() != 1 || p2.Mode() != "permit" {
			t.Errorf("a permit in a permit's scope: %p count %d, first %p count %d", p2, p2.Count(), p1, p1.Count())
		}
		if _, err := c.Lock(ctx, sem, Limit(2), Wait(0)); !errors.Is(err, ErrTimeout) {
			t.Errorf("third permit of 2: %v", err)
		}
		return p2.Release(ctx)
	}, Limit(2), Wait(0))
	if err != nil {
		t.Fatal(err)
	}

	name := lockName(t)
	l, err := c.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Lock(l.Context(), name, Detach(), TTL(time.Second), Wait(2*time.Second)); !errors.Is(err, ErrConflict) {
		t.Errorf("a Detach Lock in the scope: %v, want ErrConflict", err)
	}
	l.Release(ctx)
	d, err := c.Lock(ctx, name, Detach(), TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(d.Context(), name, Wait(2*time.Second)); !errors.Is(err, ErrConflict) {
		t.Errorf("a Lock in a detached lease's scope: %v, want ErrConflict", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("the refusals took %v: they waited", time.Since(start))
	}
	if err := d.Release(ctx); err != nil {
		t.Fatal(err)
	}

	shared := lockName(t)
	s, err := c.Lock(ctx, shared, Shared())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(s.Context(), shared, Wait(0)); !errors.Is(err, ErrUpgradeUnsupported) {
		t.Errorf("exclusive in a shared scope: %v", err)
	}
	if s2, err := c.Lock(s.Context(), shared, Shared(), Wait(0)); err != nil || s2 != s || s.Count() != 2 {
		t.Errorf("shared in a shared scope: %v, count %d", err, s.Count())
	} else {
		s2.Release(ctx)
	}
	s.Release(ctx)

	excl := lockName(t)
	e, err := c.Lock(ctx, excl)
	if err != nil {
		t.Fatal(err)
	}
	if e2, err := c.Lock(e.Context(), excl, Shared(), Wait(0)); err != nil || e2 != e || e.Count() != 2 || e.Mode() != "exclusive" {
		t.Errorf("shared in an exclusive scope: %v, count %d", err, e.Count())
	} else {
		e2.Release(ctx)
	}
	e.Release(ctx)
}

// TestReentryLockAll: LockAll re-enters the locks of its set the scope
// holds, and takes the others under the same owner; a scope holding two
// of them under different owners is refused.
func TestReentryLockAll(t *testing.T) {
	t.Parallel()
	c := dialTest(t, brokerURL(t))
	ctx := testCtx(t, 10*time.Second)
	x, y := lockName(t)+"-x", lockName(t)+"-y"

	lx, err := c.Lock(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := c.LockAll(lx.Context(), []LockSpec{{Lock: x}, {Lock: y}}, Wait(0))
	if err != nil {
		t.Fatalf("LockAll in x's scope: %v", err)
	}
	if ls[0] != lx || lx.Count() != 2 || ls[1].Name() != y || ls[1].Owner() != lx.Owner() {
		t.Errorf("LockAll: %p count %d (x %p), y's owner %q (x's %q)", ls[0], lx.Count(), lx, ls[1].Owner(), lx.Owner())
	}
	for _, l := range ls {
		l.Release(ctx)
	}
	if lx.Count() != 1 || holderCount(t, c, y) != 0 {
		t.Errorf("after releasing LockAll's: x count %d, y count %d", lx.Count(), holderCount(t, c, y))
	}

	ly, err := c.Lock(lx.Context(), y) // a lease of its own, another owner
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.LockAll(ly.Context(), []LockSpec{{Lock: x}, {Lock: y}}, Wait(2*time.Second)); !errors.Is(err, ErrConflict) {
		t.Errorf("LockAll over two owners: %v, want ErrConflict", err)
	}
	ly.Release(ctx)
	lx.Release(ctx)
}

// TestFakeReentryOwners: on the wire, a re-entry carries the scope lease's
// owner and a plain context a fresh one; after a lost event, a Lock with
// the lost lease's context sends nothing and returns the loss.
func TestFakeReentryOwners(t *testing.T) {
	var mu sync.Mutex
	holder, count := "", 0
	f := startFake(t, func(req map[string]any, send func(string)) {
		mu.Lock()
		defer mu.Unlock()
		switch req["op"] {
		case "acquire":
			owner, _ := req["owner"].(string)
			if holder != "" && holder != owner {
				send(fmt.Sprintf(`{"id":%v,"ok":false,"error":{"code":"timeout","message":"busy"}}`, req["id"]))
				return
			}
			holder = owner
			count++
			send(fmt.Sprintf(`{"id":%v,"ok":true,"lease":"aa","lock":"x","mode":"exclusive","fence":7,"ttl_ms":30000,"count":%d}`, req["id"], count))
		case "ping":
			send(`{"event":"lost","lease":"aa","lock":"x","reason":"gone"}`)
			send(fmt.Sprintf(`{"id":%v,"ok":true,"redis":"up"}`, req["id"]))
		default:
			send(fmt.Sprintf(`{"id":%v,"ok":false,"error":{"code":"internal","message":"no"}}`, req["id"]))
		}
	})
	c := dialTest(t, f.url)
	ctx := testCtx(t, 5*time.Second)
	acquires := func() []map[string]any {
		var out []map[string]any
		for _, fl := range f.received() {
			var m map[string]any
			if json.Unmarshal([]byte(fl.line), &m) == nil && m["op"] == "acquire" {
				out = append(out, m)
			}
		}
		return out
	}

	l, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Lock(l.Context(), "x")
	if err != nil || l2 != l || l.Count() != 2 {
		t.Fatalf("re-entry: %v, count %d", err, l.Count())
	}
	if _, err := c.Lock(ctx, "x", Wait(0)); !errors.Is(err, ErrTimeout) {
		t.Errorf("plain context: %v", err)
	}
	a := acquires()
	if len(a) != 3 || a[0]["owner"] != l.Owner() || a[1]["owner"] != l.Owner() || a[2]["owner"] == l.Owner() {
		t.Fatalf("owners on the wire %v, %v, %v; the lease's %q", a[0]["owner"], a[1]["owner"], a[2]["owner"], l.Owner())
	}

	if _, err := c.Ping(ctx); err != nil { // the fake sends the loss first
		t.Fatal(err)
	}
	_, err = c.Lock(l.Context(), "x")
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ReasonGone || err != l.Err() {
		t.Errorf("Lock in the lost scope: %v", err)
	}
	if n := len(acquires()); n != 3 {
		t.Errorf("%d acquires sent, want 3: the lost scope's Lock must send nothing", n)
	}
}
