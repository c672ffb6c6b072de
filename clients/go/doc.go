// Package lockbroker is the Go client of lockbrokerd, the lock-broker daemon
// that serves distributed locks kept in Redis over a line-based JSON protocol
// (protocol/PROTOCOL.md in the lockbroker tree is the contract).
//
// A Client holds one connection (one broker session) at a time, shared by
// every goroutine that uses it. Lock takes a lock and returns a *Lease;
// Release gives it back:
//
//	c, err := lockbroker.Dial(ctx, "") // $LOCKBROKER_URL, else the default
//	l, err := c.Lock(ctx, "invoice:42", lockbroker.TTL(10*time.Second))
//	defer l.Release(context.Background())
//	write(l.Context(), l.Fence())
//
// # Invariants
//
//   - One reader goroutine per session is the only reader of the socket. It
//     routes each answer to its request by id and each event to its lease by
//     token, in the order the broker sent them, and it alone registers
//     grants and applies events: a lease is in the lease table before the
//     next line is read, so no "lost" event can slip between a grant and its
//     registration.
//   - Reentrancy belongs to (session, owner), as the protocol says, and in
//     Go the owner is the context: the contexts a lease gives (its Context()
//     and the ctx WithLock passes to fn) carry it, and a Lock of the same
//     lock with such a context re-enters it (same *Lease, Count one higher),
//     never waits for it. Any other Lock acquires under an owner of its own,
//     unless WithOwner names one: goroutines sharing a Client never
//     re-enter each other's locks, and an explicit owner always wins.
//   - A lease is held, lost or released; lost and released are final.
//     Lost() is closed on loss only; Context() is cancelled at either end;
//     Err() tells which. Release and Extend of a lost lease return the loss
//     (a *LostError) without contacting the broker.
//   - A lease bound to its session never outlives the session: when the
//     connection drops, every such lease is reported lost (reason
//     "disconnected") before any request pending on that connection fails,
//     and its token is never sent again. Detached leases survive (the broker
//     keeps them) and are released or extended through the next session.
//   - While a session holds a lease, the client drops it when the broker has
//     been silent for longer than a third of the shortest TTL held (at most
//     the keepalive, or DefaultLivenessBound): its leases are then lost
//     ("disconnected") before Redis can give them away (WithLivenessCheck).
//   - The client reconnects only when a new request needs a connection, at
//     most once per backoff step; a request whose connection drops fails
//     with ErrDisconnected and is not re-sent.
//
// Errors from the broker are *ServerError values whose Code is the protocol's
// error code; errors.Is matches them against ErrTimeout, ErrNotHeld and the
// other Err values of the same code.
package lockbroker
