package dev.lockbroker;

// Election - leader election on one lock, in the manner of etcd's
// concurrency.Election (and the Go client's election.go): an exclusive lock
// whose holder publishes a value. Campaigning is a waiting acquire with a
// value, the leader is the holder, the term is the fence, resigning is the
// release, and losing the lease is losing the leadership.

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * Leader election on one lock ({@link LockBrokerClient#election}).
 *
 * <pre>{@code
 * Election e = client.election("scheduler");
 * try (Lease term = e.campaign("10.0.0.7:8080")) {   // waits until it leads
 *     e.proclaim("10.0.0.7:9090");                    // same term (term.fence())
 *     runScheduler(term.fence());                     // LeaseLostException on leaving if leadership was lost
 * }                                                   // resigns
 * Optional<Leader> who = e.leader();
 * try (Election.Observer o = e.observe()) {           // the leader now, then each change
 *     Optional<Leader> next = o.poll(Duration.ofSeconds(10));
 * }
 * }</pre>
 */
public final class Election {
    private final LockBrokerClient c;
    private final String name;
    private volatile Lease lease;

    Election(LockBrokerClient c, String name) {
        this.c = c;
        this.name = name;
    }

    /** The election's lock name. */
    public String name() {
        return name;
    }

    /**
     * Waits until this caller leads, publishing value; returns the
     * leadership's lease (its fence is the term; closing it resigns).
     */
    public Lease campaign(String value) {
        return campaign(value, LockOptions.defaults());
    }

    /** {@link #campaign(String)} with lock options (waitTime bounds the campaign, ttl, ...). */
    public Lease campaign(String value, LockOptions options) {
        Lease l = c.lock(name, options.value(Objects.requireNonNull(value, "value")));
        lease = l;
        return l;
    }

    /** {@link #campaign(String, LockOptions)}, asynchronously (cancel the future to give up). */
    public CompletableFuture<Lease> campaignAsync(String value, LockOptions options) {
        return c.lockAsync(name, options.value(Objects.requireNonNull(value, "value"))).thenApply(l -> {
            lease = l;
            return l;
        });
    }

    /** The leadership's lease while this Election leads (null otherwise). */
    public Lease lease() {
        Lease l = lease;
        return l != null && l.isHeld() ? l : null;
    }

    /** Publishes a new value in the same term; returns the term. */
    public long proclaim(String value) {
        Lease l = lease;
        if (l == null || l.isReleased()) {
            throw new InvalidArgumentException("this Election does not lead", "proclaim", name);
        }
        return l.proclaim(value);
    }

    /** Ends this caller's leadership (nothing to do if it does not lead). */
    public void resign() {
        Lease l = lease;
        lease = null;
        if (l != null && !l.isReleased()) {
            l.close();
        }
    }

    /** Who leads now, if anyone. */
    public Optional<Leader> leader() {
        return c.inspect(name).leader();
    }

    /**
     * Observes the leadership: the leader now (or none), then each change (a
     * new term, a new value, nobody leading). Survives reconnects as a
     * {@link Watch} does.
     */
    public Observer observe() {
        return new Observer(c.watch(name));
    }

    /** The changes of an election's leadership (see {@link Election#observe()}). */
    public static final class Observer implements AutoCloseable {
        private final Watch w;
        private boolean first = true;
        private Optional<Leader> last;

        Observer(Watch w) {
            this.w = w;
        }

        /**
         * The next change, waiting up to timeout: the leader, or
         * {@code Optional.empty()} when nobody leads; null when nothing
         * changed in time (or the observer is closed).
         */
        public Optional<Leader> poll(Duration timeout) throws InterruptedException {
            long end = System.nanoTime() + timeout.toNanos();
            for (;;) {
                long left = end - System.nanoTime();
                LockInfo info = w.poll(Duration.ofNanos(Math.max(0, left)));
                if (info == null) {
                    return null;
                }
                Optional<Leader> cur = info.leader();
                if (first || !cur.equals(last)) {
                    first = false;
                    last = cur;
                    return cur;
                }
            }
        }

        @Override
        public void close() {
            w.close();
        }
    }
}
