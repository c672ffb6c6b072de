package lockbroker

// election.go - coordination beyond the mutex (the broker's "value",
// "proclaim" and "watch"): Watch, a channel of a lock's states that
// survives a dropped connection, and Election, leader election in the
// manner of etcd's concurrency.Election (Campaign, Proclaim, Resign,
// Leader, Observe).

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNoLeader is what Election.Leader returns when nobody leads.
var ErrNoLeader = errors.New("lockbroker: the election has no leader")

// offerLatest hands line to a watch's channel without blocking the reader:
// when the Watch is behind, the oldest line waiting makes room (states
// may be skipped, the latest is never lost).
func offerLatest(ch chan []byte, line []byte) {
	for {
		select {
		case ch <- line:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// startWatch sends watch on the current session: the state now, the
// watch's id and the channel of its changed events (closed when the
// session ends).
func (c *Client) startWatch(ctx context.Context, name string) (*LockInfo, string, chan []byte, error) {
	cl := &call{op: "watch", lock: name, wantRaw: true, watchCh: make(chan []byte, 64)}
	if err := c.do(ctx, cl, lockReq{Op: "watch", Lock: name}); err != nil {
		return nil, "", nil, err
	}
	info, err := parseLockInfo(cl.raw)
	if err != nil {
		return nil, "", nil, err
	}
	return info, cl.r.Watch, cl.watchCh, nil
}

// Watch watches lock name: the channel gets its state now, then its state
// after each change (a grant, a release, an expiry, a proclaim, a loss),
// heard from Redis through the broker; states may be skipped when the
// reader is behind, never the latest. When the connection drops or the
// broker restarts, Watch connects again (with the client's backoff) and
// goes on with the state read afresh. The channel is closed when ctx
// ends (the watch is ended at the broker too).
func (c *Client) Watch(ctx context.Context, name string) (<-chan LockInfo, error) {
	first, id, in, err := c.startWatch(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan LockInfo, 1)
	go func() {
		defer close(out)
		send := func(info *LockInfo) bool {
			select {
			case out <- *info:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if !send(first) {
			return
		}
		delay := c.opts.backoffMin
		for {
			select {
			case line, ok := <-in:
				if ok {
					if info, err := parseLockInfo(line); err == nil && !send(info) {
						return
					}
					continue
				}
				// The session ended: watch again on the next one.
				for {
					select {
					case <-time.After(delay):
					case <-ctx.Done():
						return
					}
					info, wid, ch, err := c.startWatch(ctx, name)
					if err == nil {
						in, id, delay = ch, wid, c.opts.backoffMin
						if !send(info) {
							return
						}
						break
					}
					if delay *= 2; delay > c.opts.backoffMax {
						delay = c.opts.backoffMax
					}
				}
			case <-ctx.Done():
				c.endWatch(id)
				return
			}
		}
	}()
	return out, nil
}

// endWatch ends watch id at the broker; best effort: a watch ends with
// its session anyway (and a later session answers not_held).
func (c *Client) endWatch(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.do(ctx, &call{op: "unwatch"}, unwatchReq{Op: "unwatch", Watch: id})
}

// Leader is who leads an election: its published value, its term (the
// fence of its lease) and its client label.
type Leader struct {
	Value  string
	Term   int64
	Client string
}

func leaderOf(info *LockInfo) (Leader, bool) {
	if info.State != "exclusive" || len(info.Holders) == 0 {
		return Leader{}, false
	}
	h := info.Holders[0]
	return Leader{Value: h.Value, Term: info.Fence, Client: h.Client}, true
}

// Election is leader election on one lock (an exclusive lock whose holder
// publishes a value): the leader is the holder, the term is the fence.
type Election struct {
	c    *Client
	name string

	mu    sync.Mutex
	lease *Lease
}

// Election returns the election name.
func (c *Client) Election(name string) *Election {
	return &Election{c: c, name: name}
}

// Campaign waits until this caller leads, publishing value (ctx and opts as
// for Lock; Wait bounds it). Leadership ends with Resign, or when its lease
// is lost: watch Lease().Lost().
func (e *Election) Campaign(ctx context.Context, value string, opts ...LockOption) error {
	l, err := e.c.Lock(ctx, e.name, append(opts, Value(value))...)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.lease = l
	e.mu.Unlock()
	return nil
}

// Lease is the leadership's lease (nil when this Election does not lead):
// its Fence is the term, its Lost() channel closes when leadership is lost.
func (e *Election) Lease() *Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease
}

// Proclaim publishes a new value in the same term.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	l := e.Lease()
	if l == nil {
		return invalidArg("Proclaim: this Election does not lead")
	}
	_, err := l.Proclaim(ctx, value)
	return err
}

// Resign ends this caller's leadership.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

// Leader returns who leads now, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.c.Inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if l, ok := leaderOf(info); ok {
		return l, nil
	}
	return Leader{}, ErrNoLeader
}

// Observe returns a channel of the leaders: the current one (if any), then
// each new term or new value, until ctx ends (see Watch).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go func() {
		defer close(out)
		states, err := e.c.Watch(ctx, e.name)
		if err != nil {
			return
		}
		var last Leader
		have := false
		for info := range states {
			info := info
			if l, ok := leaderOf(&info); ok && (!have || l.Value != last.Value || l.Term != last.Term) {
				last, have = l, true
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// LockSpec names one lock of LockAll: exclusive unless Shared, a
// semaphore's permit when Limit > 0.
type LockSpec struct {
	Lock   string
	Shared bool
	Limit  int
}

type allEntry struct {
	Lock  string `json:"lock"`
	Mode  string `json:"mode,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

type acquireAllReq struct {
	Op        string     `json:"op"`
	Locks     []allEntry `json:"locks"`
	TTLMs     *int64     `json:"ttl_ms,omitempty"`
	WaitMs    *int64     `json:"wait_ms,omitempty"`
	Watchdog  *bool      `json:"watchdog,omitempty"`
	Owner     string     `json:"owner"`
	Fair      *bool      `json:"fair,omitempty"`
	Detach    bool       `json:"detach,omitempty"`
	MaxHoldMs *int64     `json:"max_hold_ms,omitempty"`
	LockDelay *int64     `json:"lock_delay_ms,omitempty"`
}

// LockAll takes every lock of locks or none (the broker's acquire_all) and
// returns their leases in that order. The broker takes them in one total
// order, so callers asking overlapping sets in any order never deadlock;
// on a timeout (Wait), an error or ctx's end it gives back what it took.
// Options as for Lock (TTL, Wait, Watchdog, Fair, Detach, MaxHold,
// LockDelay, WithOwner); Shared, Limit and Value are per lock here.
//
// As Lock, it re-enters the locks of the set that the scope of ctx holds
// (see Lock), under their owner: the other locks of the set are then taken
// under that owner too. It fails at once with the loss when the scope lost
// one of them, and with ErrConflict when the scope holds them under
// different owners (one acquire_all has one owner) or a detached lease is
// involved.
func (c *Client) LockAll(ctx context.Context, locks []LockSpec, opts ...LockOption) ([]*Lease, error) {
	var o lockOptions
	for _, opt := range opts {
		opt(&o)
	}
	req := acquireAllReq{Op: "acquire_all", TTLMs: o.ttl, WaitMs: o.wait, Watchdog: o.watchdog,
		Fair: o.fair, Detach: o.detach, MaxHoldMs: o.maxHold, LockDelay: o.delay}
	for _, l := range locks {
		e := allEntry{Lock: l.Lock, Limit: l.Limit}
		if l.Shared {
			e.Mode = "shared"
		}
		req.Locks = append(req.Locks, e)
	}
	var ups []*Lease // the leases of ctx's scope it re-enters
	if o.owner != nil {
		req.Owner = *o.owner
	} else {
		var err error
		if ups, req.Owner, err = c.enclosingAll(ctx, locks, o.detach); err != nil {
			return nil, err
		}
		if len(ups) == 0 {
			req.Owner = c.newOwner()
		}
	}
	cl := &call{op: "acquire_all", ctx: ctx, detached: o.detach, owner: req.Owner}
	err := c.do(ctx, cl, req)
	if err == nil {
		if lerr := firstLoss(ups); lerr != nil {
			// The scope lost a lock it re-enters meanwhile: no fresh
			// grant in its place; every level the answer took goes back.
			for _, l := range cl.leases {
				l.releaseQuietly()
			}
			return nil, lerr
		}
		return cl.leases, nil
	}
	if ctx.Err() != nil && cl.done != nil {
		// Given up while it waited: cancel it at the broker, and give
		// back whatever a grant that crossed the cancel took.
		go func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = c.do(cctx, &call{op: "cancel"}, cancelReq{Op: "cancel", Target: cl.id})
			select {
			case <-cl.done:
			case <-cctx.Done():
				return
			}
			for _, l := range cl.leases {
				_ = l.Release(cctx)
			}
		}()
		err = &cancelError{lock: "acquire_all", cause: ctx.Err()}
	}
	if lerr := firstLoss(ups); lerr != nil {
		return nil, lerr
	}
	return nil, err
}

// Campaigns campaigns for as long as ctx lives: the channel gets the
// leadership's lease each time this caller is elected (its Fence is the
// term). When that lease ends (lost: a dropped connection, a broker
// restart, an expiry; or released by the caller to resign), it campaigns
// again, reconnecting with the client's backoff. The channel is closed
// when ctx ends (a lease it still holds then is released).
func (e *Election) Campaigns(ctx context.Context, value string, opts ...LockOption) <-chan *Lease {
	out := make(chan *Lease)
	go func() {
		defer close(out)
		delay := e.c.opts.backoffMin
		for ctx.Err() == nil {
			l, err := e.c.Lock(ctx, e.name, append(opts, Value(value))...)
			if err != nil {
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return
				}
				if delay *= 2; delay > e.c.opts.backoffMax {
					delay = e.c.opts.backoffMax
				}
				continue
			}
			delay = e.c.opts.backoffMin
			select {
			case out <- l:
			case <-ctx.Done():
				_ = l.Release(context.Background())
				return
			}
			select {
			case <-l.Context().Done(): // lost or released: campaign again
			case <-ctx.Done():
				_ = l.Release(context.Background())
				return
			}
		}
	}()
	return out
}
