package dev.lockbroker;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * One lock of {@link LockBrokerClient#lockAll}: exclusive, shared, or a
 * semaphore's permit.
 */
public final class LockSpec {
    private final String lock;
    private final String mode;
    private final Integer limit;

    private LockSpec(String lock, String mode, Integer limit) {
        this.lock = Objects.requireNonNull(lock, "lock");
        this.mode = mode;
        this.limit = limit;
    }

    /** The lock name, exclusive. */
    public static LockSpec exclusive(String lock) {
        return new LockSpec(lock, null, null);
    }

    /** The lock name, shared. */
    public static LockSpec shared(String lock) {
        return new LockSpec(lock, "shared", null);
    }

    /** A permit of the semaphore name with {@code limit} permits. */
    public static LockSpec permit(String lock, int limit) {
        return new LockSpec(lock, null, limit);
    }

    public String lock() {
        return lock;
    }

    Map<String, Object> wire() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("lock", lock);
        if (mode != null) {
            m.put("mode", mode);
        }
        if (limit != null) {
            m.put("limit", limit);
        }
        return m;
    }
}
