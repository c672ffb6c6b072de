package lockbroker

// lease.go - Lock, WithLock and the Lease they return.
//
// A Lease is made by the reader goroutine when the grant arrives (Client.grant)
// and is shared by every re-entry of it (through its scope, scope.go, or
// WithOwner). Its state goes from
// held to lost or to released, never back: lose and setCount(0) are the
// only ways out of held, each guarded by Lease.mu, and the first one wins.

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
	"unicode/utf8"
)

// cancelGrace bounds how long Lock waits for the broker's answer to an
// acquire it cancelled because its context ended. An acquire still not
// answered after that is left to the reader, which gives back a late grant.
const cancelGrace = 2 * time.Second

// releaseTimeout bounds the releases the client makes on its own (WithLock's,
// and those of grants nobody waits for any more).
const releaseTimeout = 10 * time.Second

type leaseState int

const (
	leaseHeld leaseState = iota
	leaseLost
	leaseReleased
)

// Lease is a held lock (or semaphore permit). Its methods are safe for
// concurrent use.
type Lease struct {
	c        *Client
	token    string
	name     string
	mode     string
	fence    int64
	ttl      time.Duration
	detached bool
	owner    string // the owner it was acquired under; re-entries use it
	lost     chan struct{}
	ctx      context.Context // carries the lease as its innermost scope
	cancel   context.CancelFunc

	mu    sync.Mutex
	sess  *session // the granting session; nil once a detached lease outlived it
	count int
	state leaseState
	err   error
}

func newLease(c *Client, s *session, cl *call, r *reply) *Lease {
	parent := cl.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(valuesOnly{parent})
	l := &Lease{
		c:        c,
		token:    r.Lease,
		name:     r.Lock,
		mode:     r.Mode,
		fence:    r.Fence,
		ttl:      time.Duration(r.TTLMs) * time.Millisecond,
		detached: cl.detached,
		owner:    cl.owner,
		lost:     make(chan struct{}),
		cancel:   cancel,
		sess:     s,
		count:    r.Count,
	}
	l.ctx = withScope(ctx, l)
	return l
}

// valuesOnly keeps a context's values but not its deadline or cancellation:
// a lease outlives the context that waited for it.
type valuesOnly struct{ context.Context }

func (valuesOnly) Deadline() (time.Time, bool) { return time.Time{}, false }
func (valuesOnly) Done() <-chan struct{}       { return nil }
func (valuesOnly) Err() error                  { return nil }

// Token is the lease token: whoever knows it may release or extend the
// lease. Keep it secret.
func (l *Lease) Token() string { return l.token }

// Name is the lock's name.
func (l *Lease) Name() string { return l.name }

// Mode is "exclusive", "shared" or "permit" (a semaphore's).
func (l *Lease) Mode() string { return l.mode }

// Fence is the fencing token: it strictly increases with every new grant
// of the lock. Pass it to the resource, which refuses a fence lower than
// the highest it has seen.
func (l *Lease) Fence() int64 { return l.fence }

// TTL is the lifetime the broker granted.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Detached reports whether the lease survives its session (Detach).
func (l *Lease) Detached() bool { return l.detached }

// Owner is the owner the lease was acquired under: the WithOwner given, else
// the go-<random>-<n> of the Lock call that took it. Re-entries through the
// lease's context use it; WithOwner(l.Owner()) re-enters from elsewhere.
func (l *Lease) Owner() string { return l.owner }

// Count is the reentrancy count as last answered by the broker; 0 once
// released.
func (l *Lease) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// Lost is closed when the lease is lost (never when it is released); by
// then Err() is the loss and Context() is cancelled. The holder must stop
// using the resource at once.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context is cancelled when the lease ends: lost, released, or its Client
// closed. It carries the values of the context given to Lock, not its
// deadline, and the lease itself: a Lock of the same lock on the same
// Client with this context (or one derived from it) re-enters the lease
// instead of waiting for it (see Lock). A re-entered lease keeps the
// context of the Lock that first took it.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease is held, a *LostError once it is lost
// (errors.Is(err, ErrLost)), ErrReleased once released.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Lease) session() *session {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sess
}

// lose marks the lease lost, unless it already ended.
func (l *Lease) lose(reason string, cause error) {
	l.mu.Lock()
	if l.state != leaseHeld {
		l.mu.Unlock()
		return
	}
	l.state = leaseLost
	l.err = &LostError{Lock: l.name, Reason: reason, Cause: cause}
	if l.sess != nil {
		l.sess.untrack(l)
	}
	l.mu.Unlock()
	// Err first, then the context, then Lost(): whoever sees Lost() closed
	// finds the context cancelled too.
	l.cancel()
	close(l.lost)
}

// setCount records the count an answer gave; at 0 the lease is released.
func (l *Lease) setCount(n int) {
	l.mu.Lock()
	if l.state != leaseHeld {
		l.mu.Unlock()
		return
	}
	l.count = n
	if n > 0 {
		l.mu.Unlock()
		return
	}
	l.state = leaseReleased
	l.err = ErrReleased
	if l.sess != nil {
		l.sess.untrack(l)
	}
	l.mu.Unlock()
	l.cancel()
	l.c.unlinkLease(l)
}

// unbind detaches a detached lease from the session it outlived.
func (l *Lease) unbind() {
	l.mu.Lock()
	l.sess = nil
	l.mu.Unlock()
}

// unlinkLease removes a released lease from the table.
func (c *Client) unlinkLease(l *Lease) {
	c.mu.Lock()
	if c.leases[l.token] == l {
		delete(c.leases, l.token)
	}
	c.mu.Unlock()
}

// target returns the session to send a request about the lease on, or the
// error that says it is over: the granting session for a bound lease, the
// current one for a detached lease that outlived its own.
func (l *Lease) target(ctx context.Context) (*session, error) {
	l.mu.Lock()
	s, err := l.sess, l.err
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if s == nil {
		return l.c.session(ctx)
	}
	return s, nil
}

// settle turns the failure of a request about the lease into what the
// caller should see: a lease the broker answers not_held, or whose session
// ended, is lost, and the loss (or an earlier one, or its release) is the
// answer.
func (l *Lease) settle(err error) error {
	var se *ServerError
	switch {
	case errors.As(err, &se) && se.Code == CodeNotHeld:
		l.lose(ReasonNotHeld, err)
	case errors.Is(err, ErrDisconnected) && !l.detached:
		l.lose(ReasonDisconnected, nil)
	default:
		return err
	}
	return l.Err()
}

// Release gives back one level of the lease; at count 0 the lock (or
// permit) is free and the lease is released. A lost lease is not sent to
// the broker: Release returns the loss. If ctx ends first, Release returns
// ctx's error and the release still takes effect when it reaches the broker.
func (l *Lease) Release(ctx context.Context) error {
	s, err := l.target(ctx)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(leaseReq{Op: "release", Lease: l.token})
	err = s.roundTrip(ctx, &call{op: "release", lock: l.name, lease: l}, body)
	if err != nil {
		return l.settle(err)
	}
	return nil
}

// releaseQuietly releases one level for a grant nobody waits for.
func (l *Lease) releaseQuietly() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = l.Release(ctx)
}

// Extend sets the lease's remaining lifetime to ttl (it does not add) and
// returns the lifetime it now has: ttl, or less where MaxHold ends it
// sooner. It keeps a lease without watchdog alive.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	s, err := l.target(ctx)
	if err != nil {
		return 0, err
	}
	ms := millis(ttl)
	body, _ := json.Marshal(leaseReq{Op: "extend", Lease: l.token, TTLMs: &ms})
	cl := &call{op: "extend", lock: l.name, lease: l}
	if err := s.roundTrip(ctx, cl, body); err != nil {
		return 0, l.settle(err)
	}
	ttl = time.Duration(cl.r.TTLMs) * time.Millisecond
	l.mu.Lock()
	if l.state == leaseHeld && !l.detached && l.sess != nil {
		// the broker renews it every ttl/3 from now on: the liveness
		// bound follows
		l.sess.track(l, ttl)
	}
	l.mu.Unlock()
	return ttl, nil
}

// Proclaim publishes a new value with an exclusive lease (an election's
// leader's) without a new term: it returns the fence, which stays the same.
func (l *Lease) Proclaim(ctx context.Context, value string) (int64, error) {
	if !utf8.ValidString(value) {
		return 0, invalidArg("value is not valid UTF-8")
	}
	s, err := l.target(ctx)
	if err != nil {
		return 0, err
	}
	body, _ := json.Marshal(proclaimReq{Op: "proclaim", Lease: l.token, Value: value})
	cl := &call{op: "proclaim", lock: l.name, lease: l}
	if err := s.roundTrip(ctx, cl, body); err != nil {
		return 0, l.settle(err)
	}
	return cl.r.Fence, nil
}

// Lock acquires the lock name and returns its lease. By default it waits
// until the lock is granted (see Wait), exclusively (see Shared, Limit).
//
// Reentrancy follows ctx, Go's scope: when ctx carries a lease of the same
// lock on this Client (ctx is, or derives from, that lease's Context() or
// the ctx WithLock passed to fn), Lock re-enters it under its owner and
// never waits: it returns the same *Lease with Count() one higher, and each
// level is released by its own Release. If that lease was lost, Lock
// returns the loss (a *LostError) at once. Any other ctx (one that carries
// no lease of the lock, such as context.Background()) acquires under an
// owner of its own: goroutines sharing the Client exclude each other, and
// so does a goroutine that asks again for a lock it holds with such a ctx
// (it waits until Wait or ctx ends). WithOwner always wins over the scope.
// Semaphores (Limit) are never re-entered: each Lock takes a permit of its
// own. Nor are detached leases (the broker's rule): a Detach Lock of a lock
// the scope holds, or a Lock of one the scope holds detached, fails at once
// with ErrConflict rather than wait for itself.
//
// When ctx ends first, Lock cancels the acquire at the broker and returns
// an error that matches both ErrCancelled and ctx's error; a grant that
// crossed the cancel is released.
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !utf8.ValidString(name) {
		return nil, invalidArg("lock name is not valid UTF-8")
	}
	req := acquireReq{
		Op: "acquire", Lock: name, Mode: o.mode, Limit: o.limit, TTLMs: o.ttl,
		WaitMs: o.wait, Watchdog: o.watchdog, Fair: o.fair, Detach: o.detach,
		MaxHoldMs: o.maxHold, Value: o.value, LockDelay: o.delay,
	}
	var up *Lease // the lease of ctx's scope this Lock re-enters
	var s *session
	switch {
	case o.owner != nil:
		if !utf8.ValidString(*o.owner) {
			return nil, invalidArg("owner is not valid UTF-8")
		}
		req.Owner = *o.owner
	case o.limit == nil:
		l, err := c.enclosing(ctx, name)
		if err != nil {
			return nil, err // the scope lost it
		}
		if l != nil {
			if o.detach {
				return nil, noReentry(name)
			}
			if s, err = l.reentrySession(); err == nil {
				up, req.Owner = l, l.owner
			} else if err != ErrReleased {
				return nil, err
			} // released meanwhile: a fresh owner after all
		}
	}
	if o.owner == nil && up == nil {
		req.Owner = c.newOwner()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &cancelError{lock: name, cause: err}
	}
	if s == nil {
		if s, err = c.session(ctx); err != nil {
			if ctx.Err() != nil && err == ctx.Err() {
				return nil, &cancelError{lock: name, cause: err}
			}
			return nil, err
		}
	}
	cl := &call{op: "acquire", lock: name, ctx: ctx, detached: o.detach, owner: req.Owner}
	if err := s.send(cl, body); err != nil {
		if up != nil {
			return nil, up.settle(err) // its session ended: the loss
		}
		return nil, err
	}
	var lost <-chan struct{} // nil unless re-entering: never ready
	if up != nil {
		lost = up.Lost()
	}
	select {
	case <-cl.done:
		return c.granted(up, cl)
	case <-ctx.Done():
	case <-lost:
	}

	// The context ended, or the lease this Lock re-enters was lost, while
	// the acquire was pending: cancel it, and wait a little for its answer
	// so that a grant that crossed the cancel is given back before Lock
	// returns. The loss wins over the context (a loss cancels fn's ctx).
	var cerr error = &cancelError{lock: name, cause: ctx.Err()}
	if err := scopeLoss(up); err != nil {
		cerr = err
	}
	cbody, _ := json.Marshal(cancelReq{Op: "cancel", Target: cl.id})
	_ = s.send(&call{op: "cancel"}, cbody)
	t := time.NewTimer(cancelGrace)
	defer t.Stop()
	select {
	case <-cl.done:
	case <-t.C:
		s.mu.Lock()
		finished := cl.finished
		cl.abandoned = !finished
		s.mu.Unlock()
		if !finished {
			return nil, cerr
		}
		<-cl.done
	}
	if cl.err == nil {
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = cl.lease.Release(rctx)
		cancel()
		return nil, cerr
	}
	if errors.Is(cl.err, ErrCancelled) || errors.Is(cerr, ErrLost) {
		return nil, cerr
	}
	return nil, cl.err
}

// granted is Lock's answer once its acquire was answered. When it re-entered
// up and up was lost meanwhile, the answer is the loss: a grant (a lease of
// its own, given after the loss) is given back. A re-entry answered
// not_held (the broker found up gone) is that loss too.
func (c *Client) granted(up *Lease, cl *call) (*Lease, error) {
	if up == nil {
		return cl.lease, cl.err
	}
	if cl.err != nil {
		return nil, up.settle(cl.err)
	}
	lerr := scopeLoss(up)
	if lerr == nil {
		return cl.lease, nil
	}
	if cl.lease != up {
		cl.lease.releaseQuietly()
	}
	return nil, lerr
}

// WithLock runs fn while holding the lock name, and releases it after. fn's
// context is cancelled when ctx ends or the lease is lost, and it carries
// the lease: a Lock or WithLock of the same lock with it re-enters the
// lease (see Lock), where one with another context would wait for it.
// WithLock returns the loss (a *LostError) if the lease was lost before it
// was released, whatever fn returned; else fn's error, else the release's.
func (c *Client) WithLock(ctx context.Context, name string, fn func(ctx context.Context, l *Lease) error, opts ...LockOption) error {
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-l.Lost():
			cancel()
		case <-stop:
		}
	}()
	ferr := fn(withScope(fctx, l), l)
	close(stop)
	cancel()

	rctx, rcancel := context.WithTimeout(valuesOnly{ctx}, releaseTimeout)
	rerr := l.Release(rctx)
	rcancel()
	if errors.Is(rerr, ErrLost) {
		return rerr
	}
	if rerr == ErrReleased {
		rerr = nil // fn released it itself
	}
	if ferr != nil {
		return ferr
	}
	return rerr
}
