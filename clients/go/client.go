package lockbroker

// client.go - the Client: its one session at a time, reconnecting on demand
// with backoff, the table of leases by token, and the ops that are not
// about one lease (ping, stats, inspect, leases, by-token release and
// extend, and Do for any other op).
//
// Locking order: Client.mu before Lease.mu before session.mu (liveness.go);
// no other lock is held while taking one.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Client is a connection to a lockbroker, safe for use by many goroutines.
// It keeps at most one session open; when the connection drops it reports
// the session's leases lost and connects again for the next request.
type Client struct {
	url         string
	opts        clientOptions
	ownerPrefix string
	ownerSeq    atomic.Uint64
	closedCh    chan struct{}

	mu       sync.Mutex
	sess     *session     // the current session, possibly dead; nil before the first
	dialing  *dialAttempt // the connect under way, if any
	failures int          // failed connects in a row
	nextDial time.Time    // no connect before this (backoff)
	closed   bool
	leases   map[string]*Lease // leases of live sessions, by token
}

// dialAttempt is one connect, shared by every request that waits for it.
type dialAttempt struct {
	done chan struct{}
	s    *session
	err  error
}

// Dial connects to the broker at url (tcp://HOST:PORT or unix:///PATH; ""
// means DefaultURL()) and passes hello. The connection is made again, when
// needed, for later requests; Dial fails only if this first one fails.
func Dial(ctx context.Context, url string, opts ...Option) (*Client, error) {
	if url == "" {
		url = DefaultURL()
	}
	if _, _, err := parseURL(url); err != nil {
		return nil, err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	c := &Client{
		url:         url,
		opts:        defaultClientOptions(),
		ownerPrefix: "go-" + hex.EncodeToString(rnd[:]) + "-",
		closedCh:    make(chan struct{}),
		leases:      make(map[string]*Lease),
	}
	for _, o := range opts {
		o(&c.opts)
	}
	if !utf8.ValidString(c.opts.client) {
		return nil, invalidArg("client label is not valid UTF-8")
	}
	if _, err := c.session(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// URL returns the broker's URL.
func (c *Client) URL() string { return c.url }

// Info returns what the broker answered to the current session's hello (the
// zero value while not connected).
func (c *Client) Info() SessionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil || c.sess.isDead() {
		return SessionInfo{}
	}
	return c.sess.info
}

// Close ends the session: the broker releases every lease it holds that is
// not detached, and each is reported lost with reason "closed". Detached
// leases stay held in the broker. Close waits for the session to end.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closedCh)
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		s.fail(ErrClosed)
		<-s.done
	}
	return nil
}

// session returns the live session, connecting when there is none: at once
// after a drop, else once the backoff of the last failed connect has passed.
// Concurrent callers share one connect; each waits for it or for its ctx.
func (c *Client) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if s := c.sess; s != nil && !s.isDead() {
		c.mu.Unlock()
		return s, nil
	}
	a := c.dialing
	if a == nil {
		a = &dialAttempt{done: make(chan struct{})}
		c.dialing = a
		go c.runDial(a, time.Until(c.nextDial))
	}
	c.mu.Unlock()
	select {
	case <-a.done:
		return a.s, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// runDial is one connect, after delay.
func (c *Client) runDial(a *dialAttempt, delay time.Duration) {
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.closedCh:
			t.Stop()
		}
	}
	var s *session
	err := ErrClosed
	if !c.isClosed() {
		s, err = c.connect()
	}
	c.mu.Lock()
	c.dialing = nil
	if err == nil && c.closed {
		s.conn.Close()
		s, err = nil, ErrClosed
	}
	if err != nil {
		c.failures++
		c.nextDial = time.Now().Add(c.backoff(c.failures))
	} else {
		c.failures = 0
		c.sess = s
		s.start()
	}
	c.mu.Unlock()
	a.s, a.err = s, err
	close(a.done)
}

// backoff is the delay after n failed connects in a row.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.backoffMin
	for i := 1; i < n && d < c.opts.backoffMax; i++ {
		d *= 2
	}
	if d > c.opts.backoffMax {
		d = c.opts.backoffMax
	}
	return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64()))
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// newOwner returns an owner that no other Lock call of any Client uses.
func (c *Client) newOwner() string {
	return fmt.Sprintf("%s%d", c.ownerPrefix, c.ownerSeq.Add(1))
}

// grant registers the lease of a granted acquire (on the reader goroutine,
// before the next line is read). A re-entry returns the lease already known.
func (c *Client) grant(s *session, cl *call, r *reply) *Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leases[r.Lease]; l != nil {
		l.mu.Lock()
		l.count = r.Count
		l.mu.Unlock()
		return l
	}
	l := newLease(c, s, cl, r)
	c.leases[r.Lease] = l
	if !l.detached {
		s.track(l, l.ttl) // the liveness bound follows it from now on
	}
	return l
}

// unlink removes the lease of token from the table if session s holds it.
func (c *Client) unlink(s *session, token string) *Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.leases[token]
	if l == nil || l.session() != s {
		return nil
	}
	delete(c.leases, token)
	return l
}

// dropSession ends the leases of a session whose connection ended: those
// bound to it are lost; detached ones are unbound (later requests about
// them go through the next session).
func (c *Client) dropSession(s *session) {
	c.mu.Lock()
	var ended []*Lease
	for token, l := range c.leases {
		if l.session() == s {
			delete(c.leases, token)
			ended = append(ended, l)
		}
	}
	reason := ReasonDisconnected
	if c.closed {
		reason = ReasonClosed
	}
	if c.sess == s && !c.closed {
		c.failures = 0
		c.nextDial = time.Time{}
	}
	c.mu.Unlock()
	for _, l := range ended {
		if l.detached {
			l.unbind()
		} else {
			l.lose(reason, nil)
		}
	}
}

// do sends one request on the current session and waits for its answer.
func (c *Client) do(ctx context.Context, cl *call, req any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	s, err := c.session(ctx)
	if err != nil {
		return err
	}
	return s.roundTrip(ctx, cl, body)
}

// Ping asks the broker whether it is there and how its Redis is: "up" or
// "down".
func (c *Client) Ping(ctx context.Context) (string, error) {
	cl := &call{op: "ping", wantRaw: true}
	if err := c.do(ctx, cl, opReq{Op: "ping"}); err != nil {
		return "", err
	}
	var r struct {
		Redis string `json:"redis"`
	}
	err := json.Unmarshal(cl.raw, &r)
	return r.Redis, err
}

// Holder is one holder of a lock, as inspect shows it.
type Holder struct {
	Mode     string        // "exclusive", "shared" or "permit"
	TTL      time.Duration // remaining lifetime
	Count    int           // reentrancy count
	Owner    string        // the holder's owner label
	Client   string        // the holder's client label
	Value    string        // an exclusive holder's published value (see Value)
	HasValue bool          // whether it has one ("" is a value)
}

// LockInfo is the state of a lock (Inspect, Watch).
type LockInfo struct {
	Lock    string
	State   string // "free", "exclusive", "shared", "semaphore" or "delayed"
	Limit   int    // a semaphore's permits; 0 for a lock
	Holders []Holder
	Waiters int           // pending acquires on every broker
	Fence   int64         // the last fence issued, 0 when Redis no longer keeps it
	Delay   time.Duration // "delayed": how long a lock delay still holds it back
}

// Inspect returns the state of a lock. It never reveals lease tokens.
func (c *Client) Inspect(ctx context.Context, name string) (*LockInfo, error) {
	if !utf8.ValidString(name) {
		return nil, invalidArg("lock name is not valid UTF-8")
	}
	cl := &call{op: "inspect", lock: name, wantRaw: true}
	if err := c.do(ctx, cl, lockReq{Op: "inspect", Lock: name}); err != nil {
		return nil, err
	}
	info, err := parseLockInfo(cl.raw)
	if err != nil {
		return nil, fmt.Errorf("lockbroker: inspect: bad answer: %w", err)
	}
	return info, nil
}

// parseLockInfo reads what inspect, watch and the changed event show.
func parseLockInfo(raw []byte) (*LockInfo, error) {
	var r struct {
		Lock    string `json:"lock"`
		State   string `json:"state"`
		Limit   int    `json:"limit"`
		Holders []struct {
			Mode   string  `json:"mode"`
			TTLMs  int64   `json:"ttl_ms"`
			Count  int     `json:"count"`
			Owner  string  `json:"owner"`
			Client string  `json:"client"`
			Value  *string `json:"value"`
		} `json:"holders"`
		Waiters int   `json:"waiters"`
		Fence   int64 `json:"fence"`
		DelayMs int64 `json:"delay_ms"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	info := &LockInfo{Lock: r.Lock, State: r.State, Limit: r.Limit, Waiters: r.Waiters, Fence: r.Fence,
		Delay: time.Duration(r.DelayMs) * time.Millisecond}
	for _, h := range r.Holders {
		hd := Holder{
			Mode: h.Mode, TTL: time.Duration(h.TTLMs) * time.Millisecond,
			Count: h.Count, Owner: h.Owner, Client: h.Client,
		}
		if h.Value != nil {
			hd.Value, hd.HasValue = *h.Value, true
		}
		info.Holders = append(info.Holders, hd)
	}
	return info, nil
}

// LeaseInfo is one lease of the session (Leases).
type LeaseInfo struct {
	Token string
	Lock  string
	Mode  string
	TTL   time.Duration // remaining lifetime as the broker last confirmed it
	Count int
	Fence int64
}

// Leases lists the leases the current session holds.
func (c *Client) Leases(ctx context.Context) ([]LeaseInfo, error) {
	cl := &call{op: "leases", wantRaw: true}
	if err := c.do(ctx, cl, opReq{Op: "leases"}); err != nil {
		return nil, err
	}
	var r struct {
		Leases []struct {
			Lease string `json:"lease"`
			Lock  string `json:"lock"`
			Mode  string `json:"mode"`
			TTLMs int64  `json:"ttl_ms"`
			Count int    `json:"count"`
			Fence int64  `json:"fence"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(cl.raw, &r); err != nil {
		return nil, fmt.Errorf("lockbroker: leases: bad answer: %w", err)
	}
	out := make([]LeaseInfo, 0, len(r.Leases))
	for _, l := range r.Leases {
		out = append(out, LeaseInfo{
			Token: l.Lease, Lock: l.Lock, Mode: l.Mode,
			TTL: time.Duration(l.TTLMs) * time.Millisecond, Count: l.Count, Fence: l.Fence,
		})
	}
	return out, nil
}

// Stats is the broker's counters (the stats op).
type Stats struct {
	Uptime        time.Duration
	Connections   int64
	Sessions      int64
	Leases        int64 // leases of this broker's sessions, detached ones not included
	Waiters       int64 // acquires pending on this broker
	AcquiredTotal int64
	ReleasedTotal int64
	TimeoutsTotal int64
	LostTotal     int64
	Redis         string // "up" or "down"
	RedisMode     string // "single", "sentinel", "cluster" or "redlock"
	// Raw holds every field as the broker sent it, those above included.
	Raw map[string]json.RawMessage
}

// Stats returns the broker's counters.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	cl := &call{op: "stats", wantRaw: true}
	if err := c.do(ctx, cl, opReq{Op: "stats"}); err != nil {
		return nil, err
	}
	var r struct {
		UptimeS       int64  `json:"uptime_s"`
		Connections   int64  `json:"connections"`
		Sessions      int64  `json:"sessions"`
		Leases        int64  `json:"leases"`
		Waiters       int64  `json:"waiters"`
		AcquiredTotal int64  `json:"acquired_total"`
		ReleasedTotal int64  `json:"released_total"`
		TimeoutsTotal int64  `json:"timeouts_total"`
		LostTotal     int64  `json:"lost_total"`
		Redis         string `json:"redis"`
		RedisMode     string `json:"redis_mode"`
	}
	st := &Stats{}
	if err := json.Unmarshal(cl.raw, &r); err != nil {
		return nil, fmt.Errorf("lockbroker: stats: bad answer: %w", err)
	}
	if err := json.Unmarshal(cl.raw, &st.Raw); err != nil {
		return nil, fmt.Errorf("lockbroker: stats: bad answer: %w", err)
	}
	delete(st.Raw, "id")
	delete(st.Raw, "ok")
	st.Uptime = time.Duration(r.UptimeS) * time.Second
	st.Connections, st.Sessions, st.Leases, st.Waiters = r.Connections, r.Sessions, r.Leases, r.Waiters
	st.AcquiredTotal, st.ReleasedTotal = r.AcquiredTotal, r.ReleasedTotal
	st.TimeoutsTotal, st.LostTotal = r.TimeoutsTotal, r.LostTotal
	st.Redis, st.RedisMode = r.Redis, r.RedisMode
	return st, nil
}

// ReleaseToken releases one level of the lease with this token, which may
// come from another session or process (a detached lease's token kept
// elsewhere). It returns the lease's remaining count. For a lease this
// Client holds, it is Lease.Release.
func (c *Client) ReleaseToken(ctx context.Context, token string) (int, error) {
	if l := c.known(token); l != nil {
		if err := l.Release(ctx); err != nil {
			return 0, err
		}
		return l.Count(), nil
	}
	cl := &call{op: "release"}
	if err := c.do(ctx, cl, leaseReq{Op: "release", Lease: token}); err != nil {
		return 0, err
	}
	return cl.r.Count, nil
}

// ExtendToken sets the remaining lifetime of the lease with this token to
// ttl and returns the lifetime it now has (less when its MaxHold ends it
// sooner). For a lease this Client holds, it is Lease.Extend.
func (c *Client) ExtendToken(ctx context.Context, token string, ttl time.Duration) (time.Duration, error) {
	if l := c.known(token); l != nil {
		return l.Extend(ctx, ttl)
	}
	ms := millis(ttl)
	cl := &call{op: "extend"}
	if err := c.do(ctx, cl, leaseReq{Op: "extend", Lease: token, TTLMs: &ms}); err != nil {
		return 0, err
	}
	return time.Duration(cl.r.TTLMs) * time.Millisecond, nil
}

func (c *Client) known(token string) *Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leases[token]
}

// Do sends any other op (one a newer broker adds) with the given fields and
// returns its whole answer line. Errors are as for every op. "hello" and
// "acquire" are refused: their state lives in the Client (use Dial and
// Lock), and so is a field named "id" or "op".
func (c *Client) Do(ctx context.Context, op string, fields map[string]any) (json.RawMessage, error) {
	if op == "hello" || op == "acquire" {
		return nil, invalidArg("Do(%q): use Dial or Lock", op)
	}
	req := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		if k == "id" || k == "op" {
			return nil, invalidArg("Do(%q): the client sets field %q", op, k)
		}
		req[k] = v
	}
	req["op"] = op
	cl := &call{op: op, wantRaw: true}
	if err := c.do(ctx, cl, req); err != nil {
		return nil, err
	}
	return cl.raw, nil
}
