package lockbroker

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"
)

// An election (issue 27): Campaign leads with a value, Proclaim keeps the
// term, Leader and Observe show who leads, Resign hands over to a waiting
// candidate in a higher term.
func TestElectionCampaignObserveResign(t *testing.T) {
	url := brokerURL(t)
	a, b := dialTest(t, url), dialTest(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := lockName(t)
	ea, eb := a.Election(name), b.Election(name)

	if _, err := ea.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v", err)
	}
	obs := eb.Observe(ctx)
	if err := ea.Campaign(ctx, "a:1"); err != nil {
		t.Fatal(err)
	}
	term := ea.Lease().Fence()
	if l := <-obs; l.Value != "a:1" || l.Term != term {
		t.Fatalf("observed %+v, want a:1 in term %d", l, term)
	}
	if err := ea.Proclaim(ctx, "a:2"); err != nil {
		t.Fatal(err)
	}
	if l := <-obs; l.Value != "a:2" || l.Term != term {
		t.Fatalf("observed %+v after the proclaim", l)
	}
	if l, err := eb.Leader(ctx); err != nil || l.Value != "a:2" {
		t.Fatalf("Leader: %+v %v", l, err)
	}
	won := make(chan error, 1)
	go func() { won <- eb.Campaign(ctx, "b:1") }()
	select {
	case err := <-won:
		t.Fatalf("two leaders (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if l := <-obs; l.Value != "b:1" || l.Term <= term {
		t.Fatalf("observed %+v, want b:1 in a term above %d", l, term)
	}
	if err := ea.Proclaim(ctx, "x"); err == nil {
		t.Fatal("Proclaim without leading")
	}
}

// Watch survives a broker restart: it watches again and goes on.
func TestWatchAcrossABrokerRestart(t *testing.T) {
	br := startBroker(t, "")
	c, other := dialTest(t, br.url), dialTest(t, br.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := lockName(t)
	states, err := c.Watch(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if s := <-states; s.State != "free" {
		t.Fatalf("first state %+v", s)
	}
	l, err := other.Lock(ctx, name, Wait(0), Value("v"), LockDelay(0), TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if s := <-states; s.State != "exclusive" || s.Fence != l.Fence() || s.Holders[0].Value != "v" {
		t.Fatalf("after the grant: %+v", s)
	}
	br.kill()
	br.start()
	// a fresh state on the new session, then the changes made there
	fresh := <-states
	if fresh.Lock != name {
		t.Fatalf("fresh state %+v", fresh)
	}
	if _, err := other.Lock(ctx, name+"-probe", Wait(0)); err != nil {
		t.Fatal(err)
	}
	l2, err := other.Lock(ctx, name, Wait(5*time.Second), Value("after"))
	if err != nil {
		t.Fatal(err)
	}
	for s := range states {
		if s.State == "exclusive" && s.Fence == l2.Fence() && s.Holders[0].Value == "after" {
			return
		}
	}
	t.Fatal("the grant after the restart was not seen")
}

// LockAll takes every lock or none (issue 27): the leases in the order
// asked; a busy one keeps the others free; a repeated name is refused;
// two callers asking opposite orders both get through.
func TestLockAll(t *testing.T) {
	url := brokerURL(t)
	a, b := dialTest(t, url), dialTest(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	x, y, z := lockName(t)+"-x", lockName(t)+"-y", lockName(t)+"-z"
	ls, err := a.LockAll(ctx, []LockSpec{{Lock: y}, {Lock: x, Shared: true}}, Wait(0), TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Name() != y || ls[1].Name() != x || ls[1].Mode() != "shared" {
		t.Fatalf("leases %v", ls)
	}
	if _, err := b.LockAll(ctx, []LockSpec{{Lock: z}, {Lock: y}}, Wait(200*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("busy: %v", err)
	}
	if info, _ := b.Inspect(ctx, z); info.State != "free" {
		t.Fatalf("%s kept: %+v", z, info)
	}
	for _, l := range ls {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.LockAll(ctx, []LockSpec{{Lock: x}, {Lock: x}}); err == nil {
		t.Fatal("a repeated name was taken")
	}
	done := make(chan error, 2)
	for _, order := range [][]LockSpec{{{Lock: x}, {Lock: y}}, {{Lock: y}, {Lock: x}}} {
		order := order
		c := a
		if order[0].Lock == y {
			c = b
		}
		go func() {
			ls, err := c.LockAll(ctx, order, Wait(10*time.Second))
			if err == nil {
				time.Sleep(5 * time.Millisecond)
				for _, l := range ls {
					_ = l.Release(ctx)
				}
			}
			done <- err
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// The default client label has the same shape in every client (issue 27):
// PROGRAM[PID]@HOST lockbroker-go/VERSION.
func TestDefaultLabelShape(t *testing.T) {
	re := regexp.MustCompile(`^\S+\[\d+\]@\S+ lockbroker-go/\S+$`)
	if l := defaultLabel(); !re.MatchString(l) || len(l) > 128 {
		t.Fatalf("default label %q", l)
	}
}

// Campaigns goes on across a broker restart (issue 27): the leader hears
// its term end with the connection, and is elected again, in a higher
// term, once the broker is back.
func TestCampaignsAcrossABrokerRestart(t *testing.T) {
	br := startBroker(t, "")
	c := dialTest(t, br.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	terms := c.Election(lockName(t)).Campaigns(ctx, "me", TTL(time.Second))
	first := <-terms
	if first == nil {
		t.Fatal("never elected")
	}
	br.kill()
	select {
	case <-first.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the term was not reported")
	}
	br.start()
	second := <-terms
	if second == nil || second.Fence() <= first.Fence() {
		t.Fatalf("second term %v after %d", second, first.Fence())
	}
	cancel()
	for range terms {
	}
}
