package lockbroker

// scope.go - context-scoped reentrancy: the contexts a lease gives out
// (Lease.Context, and the ctx WithLock passes to fn) carry the lease, so
// that a Lock made with such a context re-enters it instead of waiting for
// itself.
//
// The broker's reentrancy belongs to (session, owner), and Go has no
// goroutine identity to be the owner; the context is Go's way to say "this
// call runs inside that one", so it is the scope. Each lease's context
// holds a leaseScope: the lease and the scope of the context it was taken
// with, a chain from the innermost lease out, so that nested scopes of
// different locks all count. WithLock adds a node of its own for fn's ctx
// (over the scopes of the ctx it was given), so that a re-entered lease,
// whose Context() is the first Lock's, keeps the scopes it was re-entered
// in. The chain is only read (from any goroutine); a node never changes
// once made.
//
// Rules (Lock and LockAll apply them; WithOwner always wins):
//   - the innermost lease of the chain for the same lock name on the same
//     Client, not a semaphore permit, decides: held, it is re-entered under
//     its owner; lost, the acquire fails with the loss at once; released,
//     it does not count and the search goes on outward;
//   - the broker never re-enters a detached lease (it keeps them in no
//     table), so a scope's detached lease, or a Detach acquire of a lock
//     the scope holds, is refused at once (ErrConflict): never a wait for
//     itself;
//   - a context without such a lease acquires under a fresh owner of the
//     call's own, as two goroutines sharing a Client must exclude each
//     other.

import (
	"context"
	"errors"
	"fmt"
)

// scopeKey is the private context key of the innermost leaseScope.
type scopeKey struct{}

// leaseScope is one lease of a context's chain of scopes.
type leaseScope struct {
	lease *Lease
	up    *leaseScope // the scope of the context the lease was taken with
}

// scopeOf returns the innermost scope ctx carries, or nil.
func scopeOf(ctx context.Context) *leaseScope {
	if ctx == nil {
		return nil
	}
	s, _ := ctx.Value(scopeKey{}).(*leaseScope)
	return s
}

// withScope returns ctx carrying l as its innermost scope, over those ctx
// carries already.
func withScope(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, scopeKey{}, &leaseScope{lease: l, up: scopeOf(ctx)})
}

// enclosing returns the lease of lock name that ctx's scope holds on c, to
// be re-entered, or nil when there is none (a fresh owner then). The error
// is the loss of that lease when the scope lost it.
func (c *Client) enclosing(ctx context.Context, name string) (*Lease, error) {
	for s := scopeOf(ctx); s != nil; s = s.up {
		l := s.lease
		if l.c != c || l.name != name || l.mode == "permit" {
			continue
		}
		switch err := l.Err(); {
		case err == nil:
			return l, nil
		case errors.Is(err, ErrLost):
			return nil, err
		}
		// released: the scope no longer holds it; look further out
	}
	return nil, nil
}

// noReentry is the refusal of an acquire that the scope of its context
// holds but the broker would not re-enter: a detached lease is in no table
// of the broker's, so a detached lease held, or a Detach acquire, would
// only wait for itself.
func noReentry(name string) error {
	return &localError{
		msg: fmt.Sprintf("acquire %q: the scope of this context holds it, and a detached lease "+
			"(held or asked) is never re-entered: it would wait for itself "+
			"(pass WithOwner to wait for it as another owner)", name),
		code: ErrConflict,
	}
}

// reentrySession is the session to re-enter l on: the one holding it. Its
// err is l's end (the loss, or ErrReleased) when it ended meanwhile.
func (l *Lease) reentrySession() (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	if l.detached || l.sess == nil {
		return nil, noReentry(l.name)
	}
	return l.sess, nil
}

// firstLoss is the loss of the first of ups that was lost, if any.
func firstLoss(ups []*Lease) error {
	for _, up := range ups {
		if err := scopeLoss(up); err != nil {
			return err
		}
	}
	return nil
}

// scopeLoss is the loss of the enclosing lease up, if it was lost.
func scopeLoss(up *Lease) error {
	if up == nil {
		return nil
	}
	if err := up.Err(); errors.Is(err, ErrLost) {
		return err
	}
	return nil
}

// enclosingAll is enclosing for LockAll: the leases of ctx's scope among
// the locks of the set (semaphore permits aside) and the one owner they
// share (meaningless when there are none).
func (c *Client) enclosingAll(ctx context.Context, locks []LockSpec, detach bool) ([]*Lease, string, error) {
	var ups []*Lease
	owner := ""
	for _, spec := range locks {
		if spec.Limit > 0 {
			continue
		}
		l, err := c.enclosing(ctx, spec.Lock)
		if err != nil {
			return nil, "", err
		}
		if l == nil {
			continue
		}
		if detach || l.detached {
			return nil, "", noReentry(spec.Lock)
		}
		if len(ups) > 0 && l.owner != owner {
			return nil, "", &localError{
				msg: fmt.Sprintf("acquire_all: the scope of this context holds %q and %q under different owners: "+
					"one acquire_all cannot re-enter both (pass WithOwner to wait as another owner)", ups[0].name, l.name),
				code: ErrConflict,
			}
		}
		owner = l.owner
		ups = append(ups, l)
	}
	return ups, owner, nil
}
