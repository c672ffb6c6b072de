package lockbroker

// liveness.go - the session's monitor: the client's own check that the
// broker is alive (WithLivenessCheck, on by default) and the keepalive
// pings (WithKeepalive).
//
// Why: the broker renews a lease every TTL/3 and Redis frees the lock a TTL
// after the last renewal. A broker that freezes with its socket open (a
// stopped process, a hung host) stops renewing, and the lock goes to
// another client about 2/3 of a TTL later, while the holder, which hears
// nothing, would believe it still holds it. So, while the session holds a
// lease, the client gives up the session when the broker has been silent
// for longer than bound = min(shortest TTL held / 3, keepalive or
// DefaultLivenessBound): the connection is dropped and every lease of the
// session is reported lost ("disconnected") before Redis can free it.
//
// Signs of life: any bytes read from the broker (stampReader stamps
// lastRecv). To have some, the monitor pings when it has heard nothing for
// bound/3 (and pinged no sooner than bound/3 ago); with keepalive it also
// pings when nothing was written for keepalive/3, as the broker wants to
// hear from the client. Nobody waits for a ping's answer: the reader reads
// it, which is the sign of life.
//
// The bound is kept in session.held / ttlCount (guarded by session.mu):
// leases are added at their grant (on the reader goroutine, before the next
// line is read) and when Extend gives them a new TTL, and removed when they
// are lost or released. An addition that shrinks the bound (or starts the
// check) kicks the monitor, which recomputes it at once, so the first
// lease's bound applies from its grant on; a removal only relaxes it, which
// the monitor finds at its next wake-up (at most a third of the old bound).
// Without a lease (and without keepalive) the monitor sleeps until kicked
// or the session ends: an idle session is never pinged. The monitor ends
// with the session (s.done), its timer with it.
//
// Lock order: Lease.mu may be held while taking session.mu (track and
// untrack are called under it); nothing takes Lease.mu under session.mu.

import (
	"encoding/json"
	"fmt"
	"time"
)

// stampReader reads the connection and stamps the arrival of every byte.
type stampReader struct{ s *session }

func (r stampReader) Read(p []byte) (int, error) {
	n, err := r.s.conn.Read(p)
	if n > 0 {
		r.s.lastRecv.Store(int64(r.s.since()))
	}
	return n, err
}

// since is the session's monotonic clock.
func (s *session) since() time.Duration { return time.Since(s.t0) }

// wake tells the monitor that the bound may have changed.
func (s *session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// track records (or updates) a lease of the session with its TTL. Called
// with l.mu held (or before l is shared), for a held, bound lease.
func (s *session) track(l *Lease, ttl time.Duration) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return
	}
	if old, ok := s.held[l]; ok {
		s.uncount(old)
	}
	s.held[l] = ttl
	s.ttlCount[ttl]++
	shrinks := s.curBound == 0 || (ttl > 0 && ttl/3 < s.curBound)
	s.mu.Unlock()
	if shrinks {
		s.wake()
	}
}

// untrack forgets a lease that ended. Called with l.mu held.
func (s *session) untrack(l *Lease) {
	s.mu.Lock()
	if old, ok := s.held[l]; ok {
		delete(s.held, l)
		s.uncount(old)
	}
	s.mu.Unlock()
}

func (s *session) uncount(ttl time.Duration) {
	if s.ttlCount[ttl]--; s.ttlCount[ttl] <= 0 {
		delete(s.ttlCount, ttl)
	}
}

// bound is the longest silence of the broker tolerated now, 0 for none;
// it is also kept in curBound, under the same lock as the leases, so that
// track knows whether a new lease shrinks it.
func (s *session) bound() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.curBound = s.computeBound()
	return s.curBound
}

func (s *session) computeBound() time.Duration {
	ka := s.c.opts.keepalive
	if !s.c.opts.liveness || len(s.held) == 0 {
		return ka
	}
	b := ka
	if b <= 0 {
		b = DefaultLivenessBound
	}
	for ttl := range s.ttlCount {
		if ttl > 0 && ttl/3 < b {
			b = ttl / 3
		}
	}
	if b < time.Millisecond {
		b = time.Millisecond
	}
	return b
}

// monitor is the session's liveness goroutine (see the file comment).
func (s *session) monitor() {
	ka := s.c.opts.keepalive
	body, _ := json.Marshal(opReq{Op: "ping"})
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastPing time.Duration
	for {
		b := s.bound()
		now := s.since()
		recv := time.Duration(s.lastRecv.Load())
		if b > 0 && now-recv >= b {
			s.fail(fmt.Errorf("no answer from the broker for %v (liveness check: at most %v of silence while a lease is held)",
				(now - recv).Round(time.Millisecond), b))
			return
		}
		next := time.Duration(-1)
		at := func(t time.Duration) {
			if next < 0 || t < next {
				next = t
			}
		}
		if ka > 0 {
			at(time.Duration(s.lastWrite.Load()) + ka/3)
		}
		if b > 0 {
			last := recv
			if lastPing > last {
				last = lastPing
			}
			at(last + b/3)
		}
		if next >= 0 && now >= next {
			// Its answer is the sign of life; nobody waits for it. A
			// session that just ended fails the send, and s.done follows.
			lastPing = now
			_ = s.send(&call{op: "ping"}, body)
			continue
		}
		if b > 0 {
			at(recv + b)
		}
		var tick <-chan time.Time
		if next >= 0 {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(next - now)
			tick = timer.C
		}
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-tick:
		}
	}
}
