package lockbroker

// options.go - functional options of Dial (Option) and of Lock (LockOption),
// and the conversion of durations to the protocol's milliseconds.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"
)

// Defaults of the client options.
const (
	DefaultDialTimeout = 5 * time.Second
	DefaultBackoffMin  = 50 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
	// DefaultLivenessBound is the longest silence of the broker that the
	// liveness check tolerates while a lease is held, when no keepalive is
	// given (see WithLivenessCheck).
	DefaultLivenessBound = 5 * time.Second
)

// Option configures a Client (see Dial).
type Option func(*clientOptions)

type clientOptions struct {
	auth        string
	hasAuth     bool
	authFile    string
	client      string
	keepalive   time.Duration
	liveness    bool
	dialTimeout time.Duration
	backoffMin  time.Duration
	backoffMax  time.Duration
}

func defaultClientOptions() clientOptions {
	return clientOptions{
		client:      defaultLabel(),
		liveness:    true,
		dialTimeout: DefaultDialTimeout,
		backoffMin:  DefaultBackoffMin,
		backoffMax:  DefaultBackoffMax,
	}
}

// Version is this client library's version (in its default client label).
const Version = "0.1.0"

// defaultLabel is the client label sent in hello unless WithClientName,
// the same shape in every client: PROGRAM[PID]@HOST lockbroker-go/VERSION,
// valid UTF-8 of at most 128 bytes.
func defaultLabel() string {
	prog := "go"
	if len(os.Args) > 0 {
		prog = filepath.Base(os.Args[0])
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "-"
	}
	cut := func(s string) string {
		for len(s) > 40 || !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s
	}
	return fmt.Sprintf("%s[%d]@%s lockbroker-go/%s", cut(prog), os.Getpid(), cut(host), Version)
}

// WithAuth gives the secret that hello presents to a broker run with
// --auth-file.
func WithAuth(secret string) Option {
	return func(o *clientOptions) { o.auth, o.hasAuth, o.authFile = secret, true, "" }
}

// WithAuthFile reads the secret from a file at every connect; as the broker
// does, one trailing "\n" or "\r\n" is not part of it.
func WithAuthFile(path string) Option {
	return func(o *clientOptions) { o.authFile, o.hasAuth, o.auth = path, false, "" }
}

// WithClientName sets the label (at most 128 bytes) that inspect shows for
// this client's holders. The default is the program's name.
func WithClientName(label string) Option {
	return func(o *clientOptions) { o.client = label }
}

// WithKeepalive turns on liveness checking both ways: the broker ends the
// session when it hears nothing from the client for d (500ms..10m), and the
// client pings every d/3 and drops the connection (its leases then lost,
// reason "disconnected") when a ping is not answered within d. Off by
// default. With it, d is also the longest silence the client's liveness
// check tolerates while a lease is held (instead of DefaultLivenessBound),
// and the client pings even while it holds no lease.
func WithKeepalive(d time.Duration) Option {
	return func(o *clientOptions) { o.keepalive = d }
}

// WithLivenessCheck turns the client's own liveness check of the broker on
// (the default) or off. While the session holds a lease (one bound to it:
// not Detach), the client treats a broker it has heard nothing from for
// longer than a bound as gone: it drops the connection, so every lease of
// the session is lost (reason "disconnected"), before Redis can give a
// lock to someone else. The bound is a third of the shortest TTL among the
// session's leases (the broker renews every TTL/3, and Redis frees a lock a
// TTL after its last renewal), and at most the keepalive (WithKeepalive) or
// DefaultLivenessBound; it shrinks as soon as a lease with a shorter TTL is
// granted or extended, and relaxes when that lease ends. The client pings
// every third of the bound to hear from the broker (any line counts). A
// session without such a lease is not checked and not pinged (unless
// WithKeepalive asks for it). Turned off, a frozen broker (its socket still
// open) leaves the client believing it holds its leases until the broker
// runs again or closes the connection.
func WithLivenessCheck(on bool) Option {
	return func(o *clientOptions) { o.liveness = on }
}

// WithDialTimeout bounds each connect, hello included (default 5s).
func WithDialTimeout(d time.Duration) Option {
	return func(o *clientOptions) {
		if d > 0 {
			o.dialTimeout = d
		}
	}
}

// WithBackoff sets the delays between failed connects: min after the first
// failure, doubling up to max (defaults 50ms and 2s), each with ±20%
// jitter.
func WithBackoff(min, max time.Duration) Option {
	return func(o *clientOptions) {
		if min > 0 {
			o.backoffMin = min
		}
		if max >= o.backoffMin {
			o.backoffMax = max
		}
	}
}

// LockOption configures one Lock call.
type LockOption func(*lockOptions)

type lockOptions struct {
	mode     string
	limit    *int
	ttl      *int64
	wait     *int64
	watchdog *bool
	owner    *string
	fair     *bool
	detach   bool
	maxHold  *int64
	value    *string
	delay    *int64
}

// Value publishes v with the lease (an exclusive lock only): an election's
// leader's address or id, which Inspect, Watch and Election.Leader show.
func Value(v string) LockOption {
	return func(o *lockOptions) { o.value = &v }
}

// LockDelay keeps the lock from every new holder for d after the lease
// ends without a release (its session ended, it was lost, its TTL ran out
// with the holder's broker dead): its last writes may still be draining.
// A Release frees the lock at once. 0..10m.
func LockDelay(d time.Duration) LockOption {
	return func(o *lockOptions) { v := millis(d); o.delay = &v }
}

// TTL sets the lease's lifetime in Redis (100ms..24h; the broker's default
// is 30s). With the watchdog on, the broker renews it every TTL/3.
func TTL(d time.Duration) LockOption {
	return func(o *lockOptions) { v := millis(d); o.ttl = &v }
}

// Wait bounds how long Lock waits for the lock: ErrTimeout after d. Wait(0)
// tries once and never waits. Without Wait, Lock waits until the lock is
// granted or its context ends.
func Wait(d time.Duration) LockOption {
	return func(o *lockOptions) { v := millis(d); o.wait = &v }
}

// Shared asks for the lock in shared (read) mode: shared holders coexist,
// an exclusive holder excludes all others.
func Shared() LockOption {
	return func(o *lockOptions) { o.mode = "shared" }
}

// Limit makes the name a semaphore of n permits (1..1000000); each Lock
// takes one permit, with a lease and a fence of its own. Not with Shared.
func Limit(n int) LockOption {
	return func(o *lockOptions) { o.limit = &n }
}

// Detach makes a lease that is not bound to the session: it survives the
// connection (and the client) and ends only by Release, by its TTL unless
// extended, or by MaxHold. Its watchdog is off.
func Detach() LockOption {
	return func(o *lockOptions) { o.detach = true }
}

// MaxHold ends the lease d after its grant, however often it was renewed
// or extended; the holder sees it lost with reason "max_hold".
func MaxHold(d time.Duration) LockOption {
	return func(o *lockOptions) { v := millis(d); o.maxHold = &v }
}

// Watchdog turns the broker's renewal of the lease on or off (on by
// default, off with Detach). A lease without watchdog must be extended
// within its TTL or it is lost ("expired").
func Watchdog(on bool) LockOption {
	return func(o *lockOptions) { o.watchdog = &on }
}

// Fair(false) lets this acquire barge ahead of queued ones (never a shared
// one ahead of a waiting exclusive one). Fair is the default.
func Fair(on bool) LockOption {
	return func(o *lockOptions) { o.fair = &on }
}

// WithOwner acquires under the given owner (at most 128 bytes) instead of
// the one Lock would choose (the owner of the lease the scope of its
// context holds, else one of its own): an explicit owner always wins. Lock
// calls of one Client with the same owner re-enter each other's locks: the
// second one returns the same *Lease, its Count one higher, at once;
// WithOwner(l.Owner()) re-enters l from a context that does not carry it.
// Use it for reentrant code, never to share a lock between goroutines that
// each believe they hold it alone.
func WithOwner(owner string) LockOption {
	return func(o *lockOptions) { o.owner = &owner }
}

// millis converts d to whole milliseconds, rounding a fraction up.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}
