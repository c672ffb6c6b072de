package dev.lockbroker;

import java.time.Duration;

/** One lease of the session, as the {@code leases} op lists it. */
public final class LeaseInfo {
    private final String token;
    private final String lock;
    private final String mode;
    private final Duration ttl;
    private final int count;
    private final long fence;

    LeaseInfo(String token, String lock, String mode, Duration ttl, int count, long fence) {
        this.token = token;
        this.lock = lock;
        this.mode = mode;
        this.ttl = ttl;
        this.count = count;
        this.fence = fence;
    }

    /** The lease token (keep it secret). */
    public String token() {
        return token;
    }

    public String lock() {
        return lock;
    }

    public String mode() {
        return mode;
    }

    /** The remaining lifetime as the broker last confirmed it. */
    public Duration ttl() {
        return ttl;
    }

    public int count() {
        return count;
    }

    public long fence() {
        return fence;
    }

    @Override
    public String toString() {
        return "LeaseInfo[" + LockBrokerException.printable(lock) + " " + mode + " count=" + count + " fence=" + fence
                + "]";
    }
}
