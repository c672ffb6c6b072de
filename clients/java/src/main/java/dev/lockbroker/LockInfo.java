package dev.lockbroker;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The state of a lock, as {@code inspect} and {@code watch} show it (never
 * a lease token). Fields a newer broker adds are in {@link #raw()}.
 */
public final class LockInfo {
    /** One holder of a lock. */
    public static final class Holder {
        private final String mode;
        private final Duration ttl;
        private final int count;
        private final String owner;
        private final String client;
        private final String value;

        Holder(String mode, Duration ttl, int count, String owner, String client, String value) {
            this.mode = mode;
            this.ttl = ttl;
            this.count = count;
            this.owner = owner;
            this.client = client;
            this.value = value;
        }

        /** {@code "exclusive"}, {@code "shared"} or {@code "permit"}. */
        public String mode() {
            return mode;
        }

        /** The remaining lifetime. */
        public Duration ttl() {
            return ttl;
        }

        /** The reentrancy count. */
        public int count() {
            return count;
        }

        /** The holder's owner label. */
        public String owner() {
            return owner;
        }

        /** The holder's client label. */
        public String client() {
            return client;
        }

        /** An exclusive holder's published value (an election's leader's), null if none ({@code ""} is one). */
        public String value() {
            return value;
        }

        @Override
        public String toString() {
            return "Holder[" + mode + " count=" + count + " owner=" + owner + " client=" + client
                    + (value != null ? " value=" + value : "") + "]";
        }
    }

    private final String lock;
    private final String state;
    private final Integer limit;
    private final List<Holder> holders;
    private final int waiters;
    private final Long fence;
    private final Duration delay;
    private final Map<String, Object> raw;

    private LockInfo(Map<String, Object> m) {
        this.raw = Collections.unmodifiableMap(m);
        this.lock = str(m.get("lock"));
        this.state = str(m.get("state"));
        this.limit = m.get("limit") instanceof Long ? (int) (long) (Long) m.get("limit") : null;
        List<Holder> hs = new ArrayList<>();
        if (m.get("holders") instanceof List) {
            for (Object o : (List<?>) m.get("holders")) {
                if (!(o instanceof Map)) {
                    continue;
                }
                Map<?, ?> h = (Map<?, ?>) o;
                hs.add(new Holder(str(h.get("mode")), Duration.ofMillis(Lease.longOf(h.get("ttl_ms"))),
                        Lease.intOf(h.get("count")), str(h.get("owner")), str(h.get("client")),
                        h.get("value") instanceof String ? (String) h.get("value") : null));
            }
        }
        this.holders = Collections.unmodifiableList(hs);
        this.waiters = Lease.intOf(m.get("waiters"));
        this.fence = m.get("fence") instanceof Long ? (Long) m.get("fence") : null;
        this.delay = m.get("delay_ms") instanceof Long ? Duration.ofMillis((Long) m.get("delay_ms")) : null;
    }

    static LockInfo of(Map<String, Object> m) {
        return new LockInfo(m);
    }

    private static String str(Object o) {
        return o instanceof String ? (String) o : "";
    }

    /** The lock's name. */
    public String lock() {
        return lock;
    }

    /** {@code "free"}, {@code "exclusive"}, {@code "shared"}, {@code "semaphore"} or {@code "delayed"}. */
    public String state() {
        return state;
    }

    /** A semaphore's permits, null for a lock. */
    public Integer limit() {
        return limit;
    }

    /** The holders (empty when free). */
    public List<Holder> holders() {
        return holders;
    }

    /** Pending acquires of the name, on every broker. */
    public int waiters() {
        return waiters;
    }

    /** The last fence issued while Redis still keeps it, else null. */
    public Long fence() {
        return fence;
    }

    /** For a lock held back by a lock delay: the time left; else null. */
    public Duration delay() {
        return delay;
    }

    /** The leader of an election on this lock: its exclusive holder, if any. */
    public Optional<Leader> leader() {
        if (!"exclusive".equals(state) || holders.isEmpty()) {
            return Optional.empty();
        }
        Holder h = holders.get(0);
        return Optional.of(new Leader(h.value(), fence == null ? 0 : fence, h.client()));
    }

    /** Every field as the broker sent it (id and ok included for inspect). */
    public Map<String, Object> raw() {
        return raw;
    }

    @Override
    public String toString() {
        return "LockInfo[" + LockBrokerException.printable(lock) + " " + state + " holders=" + holders + " waiters="
                + waiters + " fence=" + fence + "]";
    }
}
