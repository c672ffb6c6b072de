package dev.lockbroker;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * A held lock, read lock or semaphore permit: one acquire's level of a
 * lease. {@link AutoCloseable}: leaving a try-with-resources block releases
 * this level, or throws {@link LeaseLostException} if the lease was lost
 * meanwhile, so a loss cannot pass unseen.
 *
 * <pre>{@code
 * try (Lease lease = client.lock("invoice:42", LockOptions.defaults().ttl(Duration.ofSeconds(10)))) {
 *     store.write(data, lease.fence()); // the store refuses a fence lower than the highest it saw
 * }
 * }</pre>
 *
 * <p>A reentrant acquire (same thread, same lock) returns another handle on
 * the same token with {@link #count()} one higher; each handle releases one
 * level. A handle is meant for the thread that acquired it; the loss
 * queries ({@link #isLost()}, {@link #onLost}, {@link #whenLost()}) may be
 * used from any thread.
 */
public final class Lease implements AutoCloseable {
    private final LockBrokerClient client;
    final LeaseState st;
    private final int count;
    private volatile boolean released;
    private volatile boolean closed;
    private volatile boolean lossThrown; // this handle already threw the loss to its caller

    Lease(LockBrokerClient client, LeaseState st, int count) {
        this.client = client;
        this.st = st;
        this.count = count;
    }

    /** The lock's name. */
    public String name() {
        return st.name;
    }

    /**
     * The lease token: whoever knows it may release or extend the lease.
     * Keep it secret (it is never in {@link #toString()}).
     */
    public String token() {
        return st.token;
    }

    /** {@code "exclusive"}, {@code "shared"} or {@code "permit"} (a semaphore's). */
    public String mode() {
        return st.mode;
    }

    /**
     * The fencing token: it strictly increases with every new grant of the
     * lock. Pass it to the resource, which refuses a fence lower than the
     * highest it has seen. Throws {@link LeaseLostException} once the lease
     * is lost, so a write cannot be stamped with a stale one.
     */
    public long fence() {
        checkLost();
        return st.fence;
    }

    /** The lifetime the broker last confirmed (grant or extend). */
    public Duration ttl() {
        synchronized (client.mu) {
            return Duration.ofMillis(st.ttlMs);
        }
    }

    /** The reentrancy count this acquire brought the lease to (1 for a first acquire). */
    public int count() {
        return count;
    }

    /** Whether the lease survives its session ({@link LockOptions#detach()}). */
    public boolean detached() {
        return st.detached;
    }

    /** The reentrancy owner it was acquired under. */
    public String owner() {
        return st.owner;
    }

    /** Neither released by this handle nor lost. */
    public boolean isHeld() {
        return !released && lostReason() == null;
    }

    /** Whether this handle's level was released. */
    public boolean isReleased() {
        return released;
    }

    /** Whether the lease is lost (then stop using the resource). */
    public boolean isLost() {
        return lostReason() != null;
    }

    /**
     * Why it was lost (see {@link LeaseLostException#reason()}), null while
     * it is not.
     */
    public String lostReason() {
        synchronized (client.mu) {
            return st.lostReason;
        }
    }

    /**
     * Throws {@link LeaseLostException} if the lease is lost,
     * {@link NotHeldException} if this handle was released; else returns.
     */
    public void check() {
        usable("check");
    }

    /**
     * Calls {@code callback} once if the lease is lost (at once if it is
     * already), on the client's callback thread ({@code lockbroker-callbacks}),
     * never on the I/O thread: it may call the client. Keep it short.
     */
    public void onLost(Consumer<Lease> callback) {
        client.watchLoss(this, Objects.requireNonNull(callback, "callback"));
    }

    /**
     * A future completed with this handle when the lease is lost (on the
     * callback thread); never completed if it is released instead.
     */
    public CompletableFuture<Lease> whenLost() {
        CompletableFuture<Lease> f = new CompletableFuture<>();
        onLost(f::complete);
        return f;
    }

    /**
     * Waits up to {@code timeout} for the lease to be lost; returns whether
     * it is. InterruptedException as for any wait.
     */
    public boolean awaitLost(Duration timeout) throws InterruptedException {
        try {
            st.lost.get(timeout.toNanos(), TimeUnit.NANOSECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        } catch (ExecutionException e) {
            return true;
        }
    }

    /**
     * Releases this level; returns the count the lease has left (0: the lock
     * or permit is free). Throws {@link LeaseLostException} if the lease was
     * lost (a lost lease is never sent to the broker), and
     * {@link NotHeldException} if this handle was already released. Waits
     * for the answer even if the thread is interrupted (the interrupt status
     * is kept): the caller learns whether the release happened.
     */
    public int release() {
        Map<String, Object> r = call("release", fields(), false);
        released = true;
        return intOf(r.get("count"));
    }

    /**
     * Sets the lease's remaining lifetime to {@code ttl} (it does not add)
     * and returns the lifetime it now has: ttl, or less where
     * {@link LockOptions#maxHold} ends it sooner. This keeps a lease without
     * watchdog alive.
     */
    public Duration extend(Duration ttl) {
        Map<String, Object> f = fields();
        f.put("ttl_ms", LockOptions.millis(ttl));
        Map<String, Object> r = call("extend", f, true);
        return Duration.ofMillis(longOf(r.get("ttl_ms")));
    }

    /**
     * Publishes a new value with an exclusive lease (an election's leader's)
     * without a new term; returns the fence, which stays the same.
     */
    public long proclaim(String value) {
        Map<String, Object> f = fields();
        f.put("value", Objects.requireNonNull(value, "value"));
        Map<String, Object> r = call("proclaim", f, true);
        return longOf(r.get("fence"));
    }

    /** {@link #release()}, asynchronously: the count left. */
    public CompletableFuture<Integer> releaseAsync() {
        try {
            usable("release");
        } catch (LockBrokerException e) {
            return CompletableFuture.failedFuture(e);
        }
        return client.<Integer>leaseCallAsync(this, "release", fields(), r -> {
            released = true;
            return intOf(((Map<?, ?>) r).get("count"));
        });
    }

    /** {@link #extend}, asynchronously: the lifetime the lease now has. */
    public CompletableFuture<Duration> extendAsync(Duration ttl) {
        Map<String, Object> f = fields();
        try {
            usable("extend");
            f.put("ttl_ms", LockOptions.millis(ttl));
        } catch (LockBrokerException e) {
            return CompletableFuture.failedFuture(e);
        }
        return client.leaseCallAsync(this, "extend", f, r -> Duration.ofMillis(longOf(((Map<?, ?>) r).get("ttl_ms"))));
    }

    /**
     * Leaves the lease's scope: releases this level, or throws
     * {@link LeaseLostException} if the lease was lost meanwhile (unless this
     * handle already threw that loss to its caller, from {@link #check()},
     * {@link #fence()} and the like: a loss is reported once). Nothing to do
     * for a handle already released or closed; a second close is a no-op.
     */
    @Override
    public void close() {
        if (released || closed) {
            return;
        }
        closed = true;
        boolean reported = lossThrown;
        try {
            String reason = lostReason();
            if (reason != null) {
                throw lostException(reason, null);
            }
            release();
        } catch (LeaseLostException e) {
            if (!reported) {
                throw e;
            }
        }
    }

    // ---- internals ------------------------------------------------------------

    private Map<String, Object> fields() {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lease", st.token);
        return f;
    }

    LeaseLostException lostException(String reason, Throwable cause) {
        lossThrown = true;
        return new LeaseLostException(this, reason, cause);
    }

    private void checkLost() {
        String reason = lostReason();
        if (reason != null) {
            throw lostException(reason, null);
        }
    }

    void usable(String op) {
        checkLost();
        if (released) {
            throw new NotHeldException("this lease on \"" + LockBrokerException.printable(st.name)
                    + "\" was already released", op, st.name);
        }
    }

    void markReleased() {
        released = true;
    }

    private Map<String, Object> call(String op, Map<String, Object> f, boolean interruptible) {
        usable(op);
        @SuppressWarnings("unchecked")
        Map<String, Object> r = (Map<String, Object>) client.leaseCall(this, op, f, interruptible);
        return r;
    }

    static int intOf(Object o) {
        return o instanceof Long ? (int) (long) (Long) o : 0;
    }

    static long longOf(Object o) {
        return o instanceof Long ? (Long) o : 0;
    }

    /** Never shows the token. */
    @Override
    public String toString() {
        String reason = lostReason();
        String what = reason != null ? "lost: " + reason : released ? "released" : "held";
        return "Lease[" + LockBrokerException.printable(st.name) + " " + st.mode + " fence=" + st.fence + " count="
                + count + " " + what + "]";
    }
}
