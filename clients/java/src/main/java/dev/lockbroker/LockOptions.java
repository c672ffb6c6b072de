package dev.lockbroker;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * The fields of one acquire. Immutable: each method returns a changed copy;
 * what is not set is left out of the request and the broker's default
 * applies.
 *
 * <pre>{@code
 * LockOptions o = LockOptions.defaults().ttl(Duration.ofSeconds(10)).waitTime(Duration.ofSeconds(5));
 * }</pre>
 */
public final class LockOptions implements Cloneable {
    String mode;
    Integer limit;
    Long ttlMs;
    Long waitMs;
    Boolean watchdog;
    String owner;
    Boolean fair;
    boolean detach;
    Long maxHoldMs;
    String value;
    Long lockDelayMs;
    Consumer<Lease> onLost;

    private LockOptions() {}

    /** Nothing set: exclusive, wait until granted, the broker's TTL (30 s). */
    public static LockOptions defaults() {
        return new LockOptions();
    }

    private LockOptions copy() {
        try {
            return (LockOptions) super.clone();
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
    }

    /** Milliseconds of d, a fraction rounded up. */
    static long millis(Duration d) {
        Objects.requireNonNull(d, "duration");
        if (d.isNegative()) {
            throw new InvalidArgumentException("a duration must not be negative", null, null);
        }
        long ms = d.toMillis();
        if (d.minusMillis(ms).isZero()) {
            return ms;
        }
        return ms + 1;
    }

    /**
     * The lease's lifetime in Redis (100 ms..24 h; the broker's default is
     * 30 s). With the watchdog on, the broker renews it every TTL/3.
     */
    public LockOptions ttl(Duration ttl) {
        LockOptions o = copy();
        o.ttlMs = millis(ttl);
        return o;
    }

    /**
     * How long to wait for the lock: {@link LockTimeoutException} after it.
     * {@code Duration.ZERO} tries once and never waits. Not set: wait until
     * granted (or the thread is interrupted).
     */
    public LockOptions waitTime(Duration wait) {
        LockOptions o = copy();
        o.waitMs = millis(wait);
        return o;
    }

    /** Shared (read) mode: shared holders coexist; an exclusive one excludes all. */
    public LockOptions shared() {
        LockOptions o = copy();
        o.mode = "shared";
        return o;
    }

    /** Exclusive mode (the default). */
    public LockOptions exclusive() {
        LockOptions o = copy();
        o.mode = "exclusive";
        return o;
    }

    /**
     * Makes the name a semaphore of n permits (1..1000000): each acquire
     * takes one, with a lease and a fence of its own (mode {@code "permit"}).
     * Not with {@link #shared()}.
     */
    public LockOptions limit(int n) {
        LockOptions o = copy();
        o.limit = n;
        return o;
    }

    /**
     * The broker's renewal of the lease, on by default (off with
     * {@link #detach()}). A lease without watchdog must be extended within
     * its TTL or it is lost ({@code expired}).
     */
    public LockOptions watchdog(boolean on) {
        LockOptions o = copy();
        o.watchdog = on;
        return o;
    }

    /**
     * The reentrancy owner (at most 128 bytes) of this acquire instead of
     * the calling thread's: acquires of one client with the same owner
     * re-enter each other's locks.
     */
    public LockOptions owner(String owner) {
        LockOptions o = copy();
        o.owner = Objects.requireNonNull(owner, "owner");
        return o;
    }

    /**
     * {@code false} lets this acquire barge ahead of queued ones (a shared
     * one never ahead of a waiting exclusive one). Fair is the default.
     */
    public LockOptions fair(boolean on) {
        LockOptions o = copy();
        o.fair = on;
        return o;
    }

    /**
     * A lease not bound to the session: it survives the connection and the
     * client, and ends only by release, by its TTL unless extended, or by
     * {@link #maxHold}. Its watchdog is off. Keep its {@link Lease#token()}
     * to release it later ({@link LockBrokerClient#releaseToken}).
     */
    public LockOptions detach() {
        LockOptions o = copy();
        o.detach = true;
        return o;
    }

    /**
     * Ends the lease d after its grant however often it was renewed or
     * extended; the holder sees it lost with reason {@code max_hold}.
     */
    public LockOptions maxHold(Duration d) {
        LockOptions o = copy();
        o.maxHoldMs = millis(d);
        return o;
    }

    /**
     * Publishes v with the lease (exclusive only): an election's leader's
     * address or id, which inspect, watch and {@link Election#leader()} show.
     */
    public LockOptions value(String v) {
        LockOptions o = copy();
        o.value = Objects.requireNonNull(v, "value");
        return o;
    }

    /**
     * Keeps the lock from every new holder for d after the lease ends
     * without a release (its session ended, it was lost, its TTL ran out
     * with its broker dead). A release frees the lock at once. 0..10 min.
     */
    public LockOptions lockDelay(Duration d) {
        LockOptions o = copy();
        o.lockDelayMs = millis(d);
        return o;
    }

    /**
     * Called once if the lease is lost, on the client's callback thread
     * ({@code lockbroker-callbacks}); registered before the grant, so no
     * loss is missed. Same as {@link Lease#onLost} right after the grant.
     */
    public LockOptions onLost(Consumer<Lease> callback) {
        LockOptions o = copy();
        o.onLost = Objects.requireNonNull(callback, "callback");
        return o;
    }

    /** The acquire's fields (without id and op). */
    Map<String, Object> fields(String name, String owner) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lock", name);
        if (mode != null) {
            f.put("mode", mode);
        }
        if (limit != null) {
            f.put("limit", limit);
        }
        if (ttlMs != null) {
            f.put("ttl_ms", ttlMs);
        }
        if (waitMs != null) {
            f.put("wait_ms", waitMs);
        }
        if (watchdog != null) {
            f.put("watchdog", watchdog);
        }
        f.put("owner", owner);
        if (fair != null) {
            f.put("fair", fair);
        }
        if (detach) {
            f.put("detach", Boolean.TRUE);
        }
        if (maxHoldMs != null) {
            f.put("max_hold_ms", maxHoldMs);
        }
        if (value != null) {
            f.put("value", value);
        }
        if (lockDelayMs != null) {
            f.put("lock_delay_ms", lockDelayMs);
        }
        return f;
    }
}
