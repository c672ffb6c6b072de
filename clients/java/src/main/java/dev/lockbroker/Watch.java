package dev.lockbroker;

// Watch - the broker's watch of one lock as a queue of states: the state
// now, then one per change. The I/O thread offers each state (and a marker
// when the session ends) to the queue without blocking; the consumer takes
// them and, on the marker, watches again on a new session (with the
// client's backoff), so the watch goes on across a dropped connection or a
// broker restart with the state read afresh. When the consumer is behind,
// the oldest states make room: states may be skipped, never the latest.

import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.concurrent.LinkedBlockingDeque;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A watch of one lock ({@link LockBrokerClient#watch}): {@link #poll} and
 * {@link #take} give its state now, then its state after each change (a
 * grant, a release, an expiry, a proclaim, a loss), heard from Redis
 * through the broker. It survives a dropped connection or a broker restart:
 * it watches again (with the client's backoff) and goes on with the state
 * read afresh. Iterable (blocking, until closed). {@link #close()} ends it
 * at the broker. One consumer thread at a time.
 */
public final class Watch implements AutoCloseable, Iterable<LockInfo> {
    private static final int MAX_QUEUED = 1024;
    private static final Object SESSION_ENDED = new Object();
    private static final Object CLOSED = new Object();

    private final LockBrokerClient c;
    private final String name;
    private final LinkedBlockingDeque<Object> q = new LinkedBlockingDeque<>();
    private volatile String id;
    private volatile boolean closed;

    Watch(LockBrokerClient c, String name) {
        this.c = c;
        this.name = name;
        start();
    }

    /** The watched lock's name. */
    public String name() {
        return name;
    }

    private void offer(Object o) {
        if (closed) {
            return;
        }
        while (q.size() >= MAX_QUEUED) {
            q.pollFirst();
        }
        q.offerLast(o);
    }

    private void start() {
        Consumer<Map<String, Object>> sink = m -> offer(m == null ? SESSION_ENDED : m);
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lock", name);
        Session s = c.session("watch");
        Call call = c.send(s, "watch", f, name, sink);
        Object r;
        try {
            r = call.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancelledException("the thread was interrupted while waiting for the answer", "watch", name, e);
        }
        Object w = ((Map<?, ?>) r).get("watch");
        id = w instanceof String ? (String) w : null;
    }

    /**
     * The next state, waiting up to timeout; null when none came in time or
     * the watch is closed. Watches again after a dropped connection within
     * the same timeout.
     */
    public LockInfo poll(Duration timeout) throws InterruptedException {
        long end = System.nanoTime() + timeout.toNanos();
        long delay = c.opts.backoffMin.toNanos();
        while (!closed) {
            Object o = q.pollFirst(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (o == null || o == CLOSED) {
                return null;
            }
            if (o != SESSION_ENDED) {
                @SuppressWarnings("unchecked")
                Map<String, Object> m = (Map<String, Object>) o;
                return LockInfo.of(m);
            }
            // The session ended: watch again on a new one.
            while (!closed) {
                try {
                    start();
                    break;
                } catch (CancelledException e) {
                    throw (InterruptedException) new InterruptedException("watch interrupted").initCause(e);
                } catch (LockBrokerException e) {
                    if (c.isClosed()) {
                        return null; // for good
                    }
                    long left = end - System.nanoTime();
                    if (left <= delay) {
                        q.offerFirst(SESSION_ENDED); // the next poll tries again
                        return null;
                    }
                    TimeUnit.NANOSECONDS.sleep(delay);
                    delay = Math.min(delay * 2, c.opts.backoffMax.toNanos());
                }
            }
        }
        return null;
    }

    /** The next state, waiting as long as it takes; null once the watch is closed. */
    public LockInfo take() throws InterruptedException {
        while (!closed) {
            LockInfo i = poll(Duration.ofHours(1));
            if (i != null) {
                return i;
            }
        }
        return null;
    }

    /** Ends the watch (at the broker too, best effort: a watch ends with its session anyway). */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        q.clear();
        q.offerLast(CLOSED);
        String w = id;
        if (w != null) {
            c.forgetWatch(w);
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("watch", w);
            try {
                c.requestAsync("unwatch", f);
            } catch (RuntimeException e) {
                // gone with its session already
            }
        }
    }

    /** Blocking iteration over the states until the watch is closed (an interrupt ends it too). */
    @Override
    public Iterator<LockInfo> iterator() {
        return new Iterator<>() {
            private LockInfo next;

            @Override
            public boolean hasNext() {
                if (next == null) {
                    try {
                        next = take();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return false;
                    }
                }
                return next != null;
            }

            @Override
            public LockInfo next() {
                if (!hasNext()) {
                    throw new NoSuchElementException();
                }
                LockInfo i = next;
                next = null;
                return i;
            }
        };
    }
}
