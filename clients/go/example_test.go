package lockbroker_test

// example_test.go - the package's examples, as go doc shows them. Each runs
// against the broker at $LOCKBROKER_URL (tests/clients/with-broker.sh
// starts one) and prints only what any broker answers the same way (a
// state, a mode, whether a fence went up), so that `go test` checks its
// output. An example cannot skip: without LOCKBROKER_URL, TestMain leaves
// them out.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	lockbroker "lockbroker.dev/client"
)

// TestMain leaves the examples out when there is no broker to run them
// against (LOCKBROKER_URL unset) and -run does not choose what to run: the
// tests run alone, and those that need a broker skip.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv("LOCKBROKER_URL") == "" && flag.Lookup("test.run").Value.String() == "" {
		fmt.Fprintln(os.Stderr, "LOCKBROKER_URL is not set: the examples are not run (see tests/clients/with-broker.sh)")
		if err := flag.Set("test.run", "^(Test|Fuzz)"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// Dial, then run a function under a lock.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "") // $LOCKBROKER_URL, else the default socket or tcp://127.0.0.1:7380
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	err = c.WithLock(ctx, "example:invoice:42", func(ctx context.Context, l *lockbroker.Lease) error {
		// Write with l.Fence() (a store refuses a fence lower than the
		// highest it saw); ctx ends if the lease is lost.
		fmt.Println("holding", l.Name(), "in mode", l.Mode())
		return nil
	}, lockbroker.TTL(10*time.Second), lockbroker.Wait(5*time.Second))
	switch {
	case errors.Is(err, lockbroker.ErrTimeout):
		fmt.Println("busy for 5 s")
	case errors.Is(err, lockbroker.ErrLost):
		fmt.Println("the lease was lost while the function ran:", err)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("released")
	}
	// Output:
	// holding example:invoice:42 in mode exclusive
	// released
}

// Reentrancy follows the context: fn's ctx carries the lease, so a nested
// WithLock (or Lock) of the same lock with it re-enters instead of waiting
// for itself; a context without the lease would wait like another caller.
func ExampleClient_WithLock_reentrant() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	post := func(ctx context.Context) error {
		// Called with or without the lock held: it takes it either way.
		return c.WithLock(ctx, "example:ledger:reentrant", func(ctx context.Context, l *lockbroker.Lease) error {
			fmt.Println("posting at count", l.Count())
			return nil
		}, lockbroker.Wait(5*time.Second))
	}
	err = c.WithLock(ctx, "example:ledger:reentrant", func(ctx context.Context, l *lockbroker.Lease) error {
		fmt.Println("holding at count", l.Count())
		if err := post(ctx); err != nil { // fn's ctx: re-enters
			return err
		}
		_, err := c.Lock(context.Background(), "example:ledger:reentrant", lockbroker.Wait(0))
		fmt.Println("another context times out:", errors.Is(err, lockbroker.ErrTimeout))
		fmt.Println("back at count", l.Count())
		return nil
	}, lockbroker.TTL(10*time.Second), lockbroker.Wait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released")
	// Output:
	// holding at count 1
	// posting at count 2
	// another context times out: true
	// back at count 1
	// released
}

func ExampleClient_Lock() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	l, err := c.Lock(ctx, "example:report", lockbroker.TTL(10*time.Second), lockbroker.Wait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fence:", l.Fence() > 0)

	// A Lock whose context does not carry the lease (ctx here, not
	// l.Context()) has an owner of its own, so it waits like another
	// process would; Wait(0) tries once.
	_, err = c.Lock(ctx, "example:report", lockbroker.Wait(0))
	fmt.Println("second try times out:", errors.Is(err, lockbroker.ErrTimeout))

	if err := l.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released:", errors.Is(l.Err(), lockbroker.ErrReleased))

	next, err := c.Lock(ctx, "example:report", lockbroker.Wait(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("next fence is higher:", next.Fence() > l.Fence())
	_ = next.Release(ctx)
	// Output:
	// fence: true
	// second try times out: true
	// released: true
	// next fence is higher: true
}

func ExampleClient_Inspect() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "", lockbroker.WithClientName("billing-7"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	l, err := c.Lock(ctx, "example:ledger", lockbroker.WithOwner("job-1"), lockbroker.TTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := c.Inspect(ctx, "example:ledger")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("state:", info.State, "waiters:", info.Waiters, "fence is ours:", info.Fence == l.Fence())
	for _, h := range info.Holders {
		fmt.Println("holder:", h.Mode, h.Owner, h.Client, "count:", h.Count, "ttl left:", h.TTL > 0 && h.TTL <= 10*time.Second)
	}

	_ = l.Release(ctx)
	if info, err = c.Inspect(ctx, "example:ledger"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("state:", info.State, "holders:", len(info.Holders))
	// Output:
	// state: exclusive waiters: 0 fence is ours: true
	// holder: exclusive job-1 billing-7 count: 1 ttl left: true
	// state: free holders: 0
}

func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	states, err := c.Watch(wctx, "example:deploy") // closed when wctx ends
	if err != nil {
		fmt.Println(err)
		return
	}
	// The state now, then one per change. A reader that falls behind may
	// miss states in between, never the latest.
	await := func(state string) {
		for info := range states {
			if info.State == state {
				fmt.Println(info.State, "holders:", len(info.Holders))
				return
			}
		}
	}
	await("free")
	l, err := c.Lock(ctx, "example:deploy", lockbroker.TTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	await("exclusive")
	_ = l.Release(ctx)
	await("free")
	// Output:
	// free holders: 0
	// exclusive holders: 1
	// free holders: 0
}

func ExampleClient_LockAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	// Every lock or none, whatever order other callers ask them in.
	leases, err := c.LockAll(ctx, []lockbroker.LockSpec{
		{Lock: "example:account:7"},
		{Lock: "example:account:42", Shared: true},
	}, lockbroker.TTL(10*time.Second), lockbroker.Wait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range leases {
		fmt.Println(l.Name(), l.Mode())
	}
	for _, l := range leases {
		_ = l.Release(ctx)
	}
	// Output:
	// example:account:7 exclusive
	// example:account:42 shared
}

func ExampleElection_Campaign() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	e := c.Election("example:scheduler")
	// Waits until this caller leads; <-e.Lease().Lost() when it no longer does.
	if err := e.Campaign(ctx, "10.0.0.7:8080", lockbroker.TTL(10*time.Second)); err != nil {
		fmt.Println(err)
		return
	}
	term := e.Lease().Fence()
	leader, err := e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "in our term:", leader.Term == term, err)

	if err := e.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		fmt.Println(err)
		return
	}
	leader, err = e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "in our term:", leader.Term == term, err)

	if err := e.Resign(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = e.Leader(ctx)
	fmt.Println("after resigning:", errors.Is(err, lockbroker.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080 in our term: true <nil>
	// leader: 10.0.0.7:9090 in our term: true <nil>
	// after resigning: true
}

func ExampleElection_Observe() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lockbroker.Dial(ctx, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	a := c.Election("example:primary")
	if err := a.Campaign(ctx, "a", lockbroker.TTL(10*time.Second)); err != nil {
		fmt.Println(err)
		return
	}
	first := a.Lease().Fence()

	octx, stop := context.WithCancel(ctx)
	defer stop()
	leaders := a.Observe(octx) // the leader now, then each new value or term

	l := <-leaders
	fmt.Println("leader:", l.Value, "first term:", l.Term == first)

	// A second candidate (another process, as a rule) waits until a resigns.
	b := c.Election("example:primary")
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx, "b", lockbroker.TTL(10*time.Second)) }()
	if err := a.Resign(ctx); err != nil {
		fmt.Println(err)
	}
	if err := <-won; err != nil {
		fmt.Println(err)
		return
	}
	l = <-leaders
	fmt.Println("leader:", l.Value, "newer term:", l.Term > first)

	stop()
	for range leaders { // closed once octx has ended
	}
	_ = b.Resign(ctx)
	// Output:
	// leader: a first term: true
	// leader: b newer term: true
}
