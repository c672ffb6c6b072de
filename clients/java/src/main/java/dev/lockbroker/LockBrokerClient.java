package dev.lockbroker;

// LockBrokerClient - the client: its one session at a time, connecting on
// demand with backoff, the lease book, the routing of answers and events,
// the liveness check, and every op.
//
// Glossary (as in the broker): a session is one connection and what the
// broker keeps for it; a lease is one grant of a lock, named by its token;
// its fence is the grant's fencing token; an owner is the reentrancy
// identity inside a session (here: one per thread by default).
//
// Threads: callers (any number); per session one I/O thread (Session); one
// callback thread ("lockbroker-callbacks": onLost callbacks, and requests
// the I/O thread must not make itself); one timer thread
// ("lockbroker-timer": backoff delays and the liveness check); a short-
// lived "lockbroker-connect" thread per connect attempt, which callers
// share and wait for.
//
// Invariants (mu guards the lease book, the current session, each
// session's pending table and liveness counts, and the watches):
// - a call is registered in its session's pending table before its line is
//   written, and a session that ended takes no new call: Session.closed is
//   set in the same hold of mu that fails its pending calls and loses every
//   lease bound to it. So a new session exists only once the old one's
//   leases are lost: a lost lease's token is never sent again, on any
//   session (detached leases excepted: the protocol lets any session use
//   them, so they are released or extended through the next one);
// - a lease state is lost at most once, and not once released to count 0;
// - answers are matched by id only, and ids come from one counter per
//   client, never reused: a cancel can never hit a later request;
// - user code never runs on the I/O thread, nor with mu held.

import java.io.IOException;
import java.lang.System.Logger;
import java.lang.System.Logger.Level;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * A connection to lockbrokerd, safe to share between threads: locks,
 * read-write locks and semaphores kept in Redis, over the broker's
 * line-based JSON protocol.
 *
 * <pre>{@code
 * try (LockBrokerClient client = LockBrokerClient.connect("tcp://127.0.0.1:7380");
 *      Lease lease = client.lock("invoice:42", LockOptions.defaults().waitTime(Duration.ofSeconds(5)))) {
 *     store.write(data, lease.fence());
 * } // released; LeaseLostException if the lease was lost meanwhile
 * }</pre>
 *
 * <p>Threads: one client keeps one connection, which any number of threads
 * share (requests are pipelined and answered in any order). The calling
 * thread is the reentrancy owner: the same thread taking a lock it holds
 * re-enters it ({@link Lease#count()} + 1), another thread waits as another
 * process would. Asynchronous acquires ({@link #lockAsync}) each have an
 * owner of their own. {@link LockOptions#owner} chooses one.
 *
 * <p>Reconnects: a dropped connection ends the session, and the broker
 * releases its leases: each lease bound to it is reported lost
 * ({@code disconnected}) and calls pending on it fail with
 * {@link DisconnectedException}. The next call connects again, at once
 * after a drop, then with a backoff (50 ms doubling to 2 s, with jitter)
 * while connects fail. Nothing is re-sent and a lost lease's token is never
 * used again.
 *
 * <p>Blocking calls are interruptible: an interrupted call throws
 * {@link CancelledException} (its cause the {@link InterruptedException})
 * and keeps the thread's interrupt status; an interrupted acquire is
 * cancelled at the broker (a grant that crossed the cancel is given back).
 * {@link Lease#release()} is the exception: it waits for its answer.
 */
public final class LockBrokerClient implements AutoCloseable {
    /** This library's version (in its default client label). */
    public static final String VERSION = "0.1.0";

    static final String REASON_DISCONNECTED = "disconnected";
    static final String REASON_CLOSED = "closed";
    static final String REASON_NOT_HELD = "not_held";

    static final Logger LOG = System.getLogger("dev.lockbroker");

    final String url;
    final BrokerUrl address;
    final ClientOptions opts;
    private final String label;
    private final Executor executor;

    final Object mu = new Object();
    // ---- under mu ----
    private Session current;
    private CompletableFuture<Session> connecting;
    private int failures;
    private long nextAttempt; // System.nanoTime(); no connect before it
    private boolean closed;
    private boolean hadSession; // a connect succeeded once: later refusals are a restart
    private int sessionSeq;
    private final HashMap<String, LeaseState> leases = new HashMap<>();
    private final HashMap<String, WatchEntry> watches = new HashMap<>();
    private long livenessAt = Long.MAX_VALUE;
    private ScheduledFuture<?> livenessTask;

    private final AtomicLong ids = new AtomicLong();
    private final ThreadPoolExecutor callbacks;
    private final ScheduledThreadPoolExecutor timer;

    private static final class WatchEntry {
        final Session session;
        final Consumer<Map<String, Object>> sink;

        WatchEntry(Session session, Consumer<Map<String, Object>> sink) {
            this.session = session;
            this.sink = sink;
        }
    }

    /** What the I/O thread needs to build the lease of a grant. */
    static final class AcquireMeta {
        final String name;
        final boolean detached;
        final String owner;
        final Consumer<Lease> onLost;

        AcquireMeta(String name, boolean detached, String owner, Consumer<Lease> onLost) {
            this.name = name;
            this.detached = detached;
            this.owner = owner;
            this.onLost = onLost;
        }
    }

    private LockBrokerClient(String url, ClientOptions opts) {
        this.url = url;
        this.address = BrokerUrl.parse(url);
        this.opts = opts;
        this.label = opts.clientName != null ? opts.clientName : defaultLabel();
        this.executor = opts.executor != null ? opts.executor : new CompletableFuture<Void>().defaultExecutor();
        if (opts.keepalive != null) {
            long ka = LockOptions.millis(opts.keepalive);
            if (ka <= 0) {
                throw new InvalidArgumentException("keepalive must be positive", null, null);
            }
        }
        this.callbacks = new ThreadPoolExecutor(1, 1, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(),
                r -> daemon(r, "lockbroker-callbacks"));
        this.timer = new ScheduledThreadPoolExecutor(1, r -> daemon(r, "lockbroker-timer"));
        this.timer.setRemoveOnCancelPolicy(true);
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /**
     * Connects to the broker at {@link #defaultUrl()}: $LOCKBROKER_URL, else
     * the default Unix socket if it exists, else tcp://127.0.0.1:7380.
     */
    public static LockBrokerClient connect() {
        return connect(null, ClientOptions.defaults());
    }

    /** Connects to the broker at url: {@code tcp://HOST:PORT} or {@code unix:///PATH}. */
    public static LockBrokerClient connect(String url) {
        return connect(url, ClientOptions.defaults());
    }

    /**
     * Connects to the broker at url (null: {@link #defaultUrl()}) and passes
     * hello. A refused connect fails at once with
     * {@link DisconnectedException}; a wrong secret with
     * {@link UnauthorizedException}. Later connects happen when needed.
     */
    public static LockBrokerClient connect(String url, ClientOptions options) {
        LockBrokerClient c = new LockBrokerClient(url != null ? url : defaultUrl(),
                Objects.requireNonNull(options, "options"));
        try {
            c.session("hello");
        } catch (RuntimeException e) {
            c.close();
            throw e;
        }
        return c;
    }

    /** The broker lockctl would use: $LOCKBROKER_URL, else the default socket if it exists, else tcp://127.0.0.1:7380. */
    public static String defaultUrl() {
        return BrokerUrl.defaultUrl();
    }

    /** The reentrancy owner of the calling thread (unique in the process, e.g. {@code "main#1"}). */
    public static String currentOwner() {
        return Owners.current();
    }

    /** Whether {@link #close()} was called. */
    public boolean isClosed() {
        synchronized (mu) {
            return closed;
        }
    }

    /** The broker's URL. */
    public String url() {
        return url;
    }

    /** The client label sent in hello (what inspect shows as a holder's client). */
    public String clientName() {
        return label;
    }

    /**
     * What the broker answered to the current session's hello ({@code server},
     * {@code proto}, {@code session}, {@code broker}, {@code limits},
     * {@code features}), or null while not connected (or when hello was
     * refused for want of a secret).
     */
    public Map<String, Object> serverInfo() {
        synchronized (mu) {
            if (current == null || current.closed || current.info == null) {
                return null;
            }
            return Collections.unmodifiableMap(current.info);
        }
    }

    /**
     * Ends the session: the broker releases every lease of it that is not
     * detached, and each is reported lost with reason {@code closed}.
     * Detached leases stay held. Every later call throws
     * {@link DisconnectedException}.
     */
    @Override
    public void close() {
        Session s;
        CompletableFuture<Session> attempt;
        synchronized (mu) {
            if (closed) {
                return;
            }
            closed = true;
            s = current;
            attempt = connecting;
            if (s != null) {
                s.endReason = REASON_CLOSED;
            }
            if (livenessTask != null) {
                livenessTask.cancel(false);
                livenessTask = null;
            }
        }
        if (attempt != null) {
            // Its waiters are done; a session it still makes is closed at once (runConnect).
            attempt.completeExceptionally(new DisconnectedException("the client is closed", null, null));
        }
        if (s != null) {
            s.kill(null);
            s.awaitEnd(5000);
        }
        timer.shutdownNow();
        callbacks.shutdown(); // the callbacks of the leases lost by the close still run
    }

    // ---- locks ------------------------------------------------------------

    /** Takes the lock name exclusively, waiting until it is granted. */
    public Lease lock(String name) {
        return lock(name, LockOptions.defaults());
    }

    /**
     * Acquires name with the given options (by default exclusive, waiting
     * until granted) under the calling thread's owner and returns its
     * lease. {@link LockTimeoutException} when {@link LockOptions#waitTime}
     * runs out; {@link CancelledException} when the thread is interrupted
     * (the acquire is cancelled at the broker).
     */
    public Lease lock(String name, LockOptions options) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(options, "options");
        if (Thread.currentThread().isInterrupted()) {
            throw new CancelledException("the thread was interrupted before the acquire; nothing was sent", "acquire",
                    name, new InterruptedException());
        }
        String owner = ownerOf(options, false);
        Session s = session("acquire");
        Call c = send(s, "acquire", options.fields(name, owner), name,
                new AcquireMeta(name, options.detach, owner, options.onLost));
        try {
            return (Lease) c.await();
        } catch (InterruptedException e) {
            abandon(c);
            Thread.currentThread().interrupt();
            throw new CancelledException("the thread was interrupted while the acquire waited; it was cancelled",
                    "acquire", name, e);
        }
    }

    /** Tries once: the lease, or null if the lock is taken. */
    public Lease tryLock(String name) {
        return tryLock(name, Duration.ZERO, LockOptions.defaults());
    }

    /** Waits up to {@code wait}: the lease, or null if it was not granted in time. */
    public Lease tryLock(String name, Duration wait) {
        return tryLock(name, wait, LockOptions.defaults());
    }

    /**
     * As {@link #lock(String, LockOptions)} with {@code waitTime(wait)}, but
     * returns null instead of throwing {@link LockTimeoutException}. A null
     * resource is allowed in try-with-resources (nothing to close).
     */
    public Lease tryLock(String name, Duration wait, LockOptions options) {
        try {
            return lock(name, options.waitTime(wait));
        } catch (LockTimeoutException e) {
            return null;
        }
    }

    /**
     * Runs body while holding the lock, and releases it after. If the lease
     * was lost before the release, throws {@link LeaseLostException} whatever
     * body did (its own exception, if any, is added as suppressed); else
     * body's exception, else the release's; else returns body's result.
     */
    public <T> T withLock(String name, LockOptions options, Function<Lease, T> body) {
        Lease lease = lock(name, options);
        T result;
        try {
            result = body.apply(lease);
        } catch (RuntimeException | Error e) {
            try {
                lease.close();
            } catch (LeaseLostException lost) {
                if (lost.lease() == lease) {
                    lost.addSuppressed(e);
                    throw lost;
                }
                e.addSuppressed(lost);
            } catch (RuntimeException other) {
                e.addSuppressed(other);
            }
            if (lease.isLost()) {
                LeaseLostException lost = lease.lostException(lease.lostReason(), null);
                lost.addSuppressed(e);
                throw lost;
            }
            throw e;
        }
        if (lease.isLost()) {
            lease.close(); // releases nothing, marks the handle closed
            throw lease.lostException(lease.lostReason(), null);
        }
        lease.close();
        return result;
    }

    /**
     * Acquires asynchronously, under an owner of its own (no reentrancy with
     * any other acquire, unless {@link LockOptions#owner}). Cancelling the
     * future cancels the acquire at the broker; a grant that crossed the
     * cancel is given back. The future fails with the exception of the
     * broker's code ({@link LockTimeoutException}, ...).
     */
    public CompletableFuture<Lease> lockAsync(String name, LockOptions options) {
        Objects.requireNonNull(name, "name");
        String owner = ownerOf(options, true);
        return callAsync(null, "acquire", options.fields(name, owner), name,
                new AcquireMeta(name, options.detach, owner, options.onLost), r -> (Lease) r);
    }

    /** {@link #lockAsync(String, LockOptions)} with the defaults. */
    public CompletableFuture<Lease> lockAsync(String name) {
        return lockAsync(name, LockOptions.defaults());
    }

    /**
     * Takes every lock of locks or none (the broker's {@code acquire_all}) and
     * returns their leases in that order. The broker takes them in one total
     * order, so callers asking overlapping sets in any order never deadlock;
     * on a timeout, an error or an interrupt it gives back what it took.
     * Options as for lock (ttl, waitTime, watchdog, fair, detach, maxHold,
     * lockDelay, owner, onLost); mode and limit are per lock (LockSpec).
     */
    public List<Lease> lockAll(List<LockSpec> locks, LockOptions options) {
        if (Thread.currentThread().isInterrupted()) {
            throw new CancelledException("the thread was interrupted before the acquire; nothing was sent",
                    "acquire_all", null, new InterruptedException());
        }
        String owner = ownerOf(options, false);
        Map<String, Object> f = allFields(locks, options, owner);
        Session s = session("acquire_all");
        Call c = send(s, "acquire_all", f, null, new AcquireMeta(null, options.detach, owner, options.onLost));
        try {
            @SuppressWarnings("unchecked")
            List<Lease> out = (List<Lease>) c.await();
            return out;
        } catch (InterruptedException e) {
            abandon(c);
            Thread.currentThread().interrupt();
            throw new CancelledException("the thread was interrupted while acquire_all waited; it was cancelled",
                    "acquire_all", null, e);
        }
    }

    /** Every lock of names, exclusively, or none, waiting until granted. */
    public List<Lease> lockAll(String... names) {
        List<LockSpec> specs = new ArrayList<>();
        for (String n : names) {
            specs.add(LockSpec.exclusive(n));
        }
        return lockAll(specs, LockOptions.defaults());
    }

    /** {@link #lockAll(List, LockOptions)}, asynchronously (an owner of its own). */
    public CompletableFuture<List<Lease>> lockAllAsync(List<LockSpec> locks, LockOptions options) {
        String owner = ownerOf(options, true);
        Map<String, Object> f = allFields(locks, options, owner);
        return callAsync(null, "acquire_all", f, null, new AcquireMeta(null, options.detach, owner, options.onLost),
                r -> {
                    @SuppressWarnings("unchecked")
                    List<Lease> out = (List<Lease>) r;
                    return out;
                });
    }

    private static Map<String, Object> allFields(List<LockSpec> locks, LockOptions o, String owner) {
        if (o.mode != null || o.limit != null || o.value != null) {
            throw new InvalidArgumentException("lockAll: mode and limit go in each LockSpec, and value is for one lock",
                    "acquire_all", null);
        }
        List<Object> entries = new ArrayList<>();
        for (LockSpec l : locks) {
            entries.add(l.wire());
        }
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("locks", entries);
        Map<String, Object> rest = o.fields("", owner);
        rest.remove("lock");
        f.putAll(rest);
        return f;
    }

    private String ownerOf(LockOptions o, boolean async) {
        if (o.owner != null) {
            return o.owner;
        }
        if (opts.owner != null) {
            return opts.owner;
        }
        return async ? Owners.fresh() : Owners.current();
    }

    // ---- other ops --------------------------------------------------------

    /** Whether the broker is there: its Redis, {@code "up"} or {@code "down"}. */
    public String ping() {
        return (String) call("ping", new LinkedHashMap<>(), null, r -> String.valueOf(r.get("redis")));
    }

    /** {@link #ping()}, asynchronously. */
    public CompletableFuture<String> pingAsync() {
        return callAsync(null, "ping", new LinkedHashMap<>(), null, null, r -> String.valueOf(((Map<?, ?>) r).get("redis")));
    }

    /** The state of a lock (never a lease token). */
    public LockInfo inspect(String name) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lock", Objects.requireNonNull(name, "name"));
        return (LockInfo) call("inspect", f, name, LockInfo::of);
    }

    /** {@link #inspect}, asynchronously. */
    public CompletableFuture<LockInfo> inspectAsync(String name) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lock", Objects.requireNonNull(name, "name"));
        return callAsync(null, "inspect", f, name, null, r -> {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) r;
            return LockInfo.of(m);
        });
    }

    /** The leases the current session holds. */
    public List<LeaseInfo> leases() {
        Object r = call("leases", new LinkedHashMap<>(), null, m -> {
            List<LeaseInfo> out = new ArrayList<>();
            if (m.get("leases") instanceof List) {
                for (Object o : (List<?>) m.get("leases")) {
                    if (o instanceof Map) {
                        Map<?, ?> l = (Map<?, ?>) o;
                        out.add(new LeaseInfo(String.valueOf(l.get("lease")), String.valueOf(l.get("lock")),
                                String.valueOf(l.get("mode")), Duration.ofMillis(Lease.longOf(l.get("ttl_ms"))),
                                Lease.intOf(l.get("count")), Lease.longOf(l.get("fence"))));
                    }
                }
            }
            return out;
        });
        @SuppressWarnings("unchecked")
        List<LeaseInfo> out = (List<LeaseInfo>) r;
        return out;
    }

    /**
     * The broker's counters ({@code uptime_s}, {@code sessions}, {@code leases},
     * {@code acquired_total}, {@code redis}, ...), as it sent them.
     */
    public Map<String, Object> stats() {
        Object r = call("stats", new LinkedHashMap<>(), null, m -> {
            Map<String, Object> out = new LinkedHashMap<>(m);
            out.remove("id");
            out.remove("ok");
            return Collections.unmodifiableMap(out);
        });
        @SuppressWarnings("unchecked")
        Map<String, Object> out = (Map<String, Object>) r;
        return out;
    }

    /**
     * Releases one level of the lease with this token, which may come from
     * another session or process (a detached lease's token kept elsewhere);
     * returns the count left. For a lease this client holds, it is that
     * lease's {@link Lease#release()}.
     */
    public int releaseToken(String token) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lease", Objects.requireNonNull(token, "token"));
        return (Integer) call("release", f, null, r -> Lease.intOf(r.get("count")));
    }

    /**
     * Sets the remaining lifetime of the lease with this token and returns
     * the lifetime it now has (less when its maxHold ends it sooner).
     */
    public Duration extendToken(String token, Duration ttl) {
        Map<String, Object> f = new LinkedHashMap<>();
        f.put("lease", Objects.requireNonNull(token, "token"));
        f.put("ttl_ms", LockOptions.millis(ttl));
        return (Duration) call("extend", f, null, r -> Duration.ofMillis(Lease.longOf(r.get("ttl_ms"))));
    }

    /**
     * Sends any other op (one a newer broker adds) with the given fields and
     * returns its whole answer. Errors are as for every op. {@code hello},
     * {@code acquire} and {@code acquire_all} are refused (their state lives
     * in the client: use connect and lock), and so are fields named
     * {@code id} or {@code op}.
     */
    public Map<String, Object> request(String op, Map<String, ?> fields) {
        Map<String, Object> f = requestFields(op, fields);
        @SuppressWarnings("unchecked")
        Map<String, Object> r = (Map<String, Object>) call(op, f, null, m -> Collections.unmodifiableMap(m));
        return r;
    }

    /** {@link #request}, asynchronously. */
    public CompletableFuture<Map<String, Object>> requestAsync(String op, Map<String, ?> fields) {
        Map<String, Object> f;
        try {
            f = requestFields(op, fields);
        } catch (LockBrokerException e) {
            return CompletableFuture.failedFuture(e);
        }
        return callAsync(null, op, f, null, null, r -> {
            @SuppressWarnings("unchecked")
            Map<String, Object> m = (Map<String, Object>) r;
            return Collections.unmodifiableMap(m);
        });
    }

    private static Map<String, Object> requestFields(String op, Map<String, ?> fields) {
        Objects.requireNonNull(op, "op");
        if (op.equals("hello") || op.equals("acquire") || op.equals("acquire_all") || op.equals("watch")) {
            throw new InvalidArgumentException("request(\"" + op + "\"): use connect, lock, lockAll or watch", op, null);
        }
        Map<String, Object> f = new LinkedHashMap<>();
        if (fields != null) {
            for (Map.Entry<String, ?> e : fields.entrySet()) {
                if (e.getKey().equals("id") || e.getKey().equals("op")) {
                    throw new InvalidArgumentException("'" + e.getKey() + "' is set by the client", op, null);
                }
                f.put(e.getKey(), e.getValue());
            }
        }
        return f;
    }

    /**
     * Watches lock name: its state now, then its state after each change,
     * heard from Redis through the broker. The watch goes on across a
     * dropped connection or a broker restart (see {@link Watch}).
     */
    public Watch watch(String name) {
        return new Watch(this, Objects.requireNonNull(name, "name"));
    }

    /** Leader election on lock name (see {@link Election}). */
    public Election election(String name) {
        return new Election(this, Objects.requireNonNull(name, "name"));
    }

    // ---- sessions ---------------------------------------------------------

    /**
     * The live session, connecting when there is none; op names the caller's
     * request in errors. Before the client ever had a session, one attempt:
     * a dead address fails at once. Once it had one, a failed connect is
     * taken for the broker restarting: the call waits for the next attempts
     * (with the backoff) within the connect timeout.
     */
    Session session(String op) {
        long deadline = System.nanoTime() + opts.connectTimeout.toNanos();
        for (;;) {
            CompletableFuture<Session> f = sessionFuture();
            try {
                return f.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CancelledException("the thread was interrupted while waiting for a connection", op, null, e);
            } catch (ExecutionException e) {
                if (!retryConnect(e.getCause(), deadline)) {
                    throw copyFor(e.getCause(), op, null);
                }
            }
        }
    }

    /** {@link #session(String)}, asynchronously. */
    private CompletableFuture<Session> sessionAsync() {
        CompletableFuture<Session> out = new CompletableFuture<>();
        sessionAttempt(out, System.nanoTime() + opts.connectTimeout.toNanos());
        return out;
    }

    private void sessionAttempt(CompletableFuture<Session> out, long deadline) {
        sessionFuture().whenComplete((s, e) -> {
            if (e == null) {
                out.complete(s);
            } else if (retryConnect(e, deadline)) {
                sessionAttempt(out, deadline);
            } else {
                out.completeExceptionally(e);
            }
        });
    }

    /** Whether a call whose connect failed with t waits for the next attempt. */
    private boolean retryConnect(Throwable t, long deadline) {
        if (!(t instanceof DisconnectedException)) {
            return false; // hello refused (unauthorized...): not a restart
        }
        synchronized (mu) {
            return hadSession && !closed && nextAttempt != 0 && nextAttempt - deadline < 0;
        }
    }

    /** A failure shared by several callers, as an exception of each one's own. */
    static RuntimeException copyFor(Throwable t, String op, String lock) {
        if (t instanceof DisconnectedException) {
            LockBrokerException le = (LockBrokerException) t;
            return new DisconnectedException(le.brokerMessage(), op, lock, le.getCause() != null ? le.getCause() : le);
        }
        if (t instanceof LockBrokerException) {
            LockBrokerException le = (LockBrokerException) t;
            return LockBrokerException.forCode(le.code(), le.brokerMessage(), op, lock, le);
        }
        if (t instanceof RuntimeException) {
            return (RuntimeException) t;
        }
        return new IllegalStateException(t);
    }

    /**
     * The live session, or the connect under way (shared by every caller), or
     * a new one: at once after a drop, else once the backoff of the last
     * failed connect has passed.
     */
    CompletableFuture<Session> sessionFuture() {
        synchronized (mu) {
            if (closed) {
                return CompletableFuture.failedFuture(new DisconnectedException("the client is closed", null, null));
            }
            if (current != null && !current.closed) {
                return CompletableFuture.completedFuture(current);
            }
            if (connecting == null) {
                CompletableFuture<Session> attempt = new CompletableFuture<>();
                connecting = attempt;
                long delay = nextAttempt - System.nanoTime();
                if (nextAttempt == 0 || delay <= 0) {
                    startConnect(attempt);
                } else {
                    timer.schedule(() -> startConnect(attempt), delay, TimeUnit.NANOSECONDS);
                }
            }
            return connecting;
        }
    }

    private void startConnect(CompletableFuture<Session> attempt) {
        Thread t = new Thread(() -> runConnect(attempt), "lockbroker-connect");
        t.setDaemon(true);
        t.start();
    }

    private void runConnect(CompletableFuture<Session> attempt) {
        Session s = null;
        RuntimeException err = null;
        int number;
        synchronized (mu) {
            number = ++sessionSeq;
            if (closed) {
                err = new DisconnectedException("the client is closed", null, null);
            }
        }
        if (err == null) {
            try {
                boolean[] withSecret = new boolean[1];
                byte[] hello = helloLine(withSecret);
                s = Session.open(this, number, hello, withSecret[0]);
            } catch (RuntimeException e) {
                err = e;
            }
        }
        synchronized (mu) {
            connecting = null;
            if (s != null && closed) {
                s.kill(null);
                s.start(); // its I/O thread closes it
                s = null;
                err = new DisconnectedException("the client is closed", null, null);
            }
            if (err != null) {
                failures++;
                nextAttempt = System.nanoTime() + backoff(failures).toNanos();
                if (nextAttempt == 0) {
                    nextAttempt = 1;
                }
            } else {
                failures = 0;
                nextAttempt = 0;
                hadSession = true;
                current = s;
                s.start();
                replan(s);
            }
        }
        if (err != null) {
            LOG.log(Level.DEBUG, "lockbroker: connect to {0} failed: {1}", url, err.getMessage());
            attempt.completeExceptionally(err);
        } else {
            attempt.complete(s);
        }
    }

    /** The delay after n failed connects in a row: min doubled n-1 times, capped, +-20%. */
    Duration backoff(int n) {
        long min = opts.backoffMin.toNanos();
        long max = opts.backoffMax.toNanos();
        long d = min;
        for (int i = 1; i < n && d < max; i++) {
            d *= 2;
        }
        d = Math.min(d, max);
        return Duration.ofNanos((long) (d * (0.8 + 0.4 * ThreadLocalRandom.current().nextDouble())));
    }

    DisconnectedException cannotConnect(String why, Throwable cause) {
        return new DisconnectedException("cannot connect to " + url + ": " + why, null, null, cause);
    }

    private byte[] helloLine(boolean[] withSecret) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", 0L);
        m.put("op", "hello");
        m.put("client", label);
        String secret = opts.auth;
        if (opts.authFile != null) {
            try {
                byte[] b = Files.readAllBytes(opts.authFile);
                String s = new String(b, StandardCharsets.UTF_8);
                if (s.endsWith("\r\n")) {
                    s = s.substring(0, s.length() - 2);
                } else if (s.endsWith("\n")) {
                    s = s.substring(0, s.length() - 1);
                }
                secret = s;
            } catch (IOException e) {
                throw new InvalidArgumentException("authFile " + opts.authFile + ": " + e, "hello", null);
            }
        }
        if (secret != null) {
            m.put("auth", secret);
            withSecret[0] = true;
        }
        if (opts.keepalive != null) {
            m.put("keepalive_ms", LockOptions.millis(opts.keepalive));
        }
        try {
            return (Json.write(m) + "\n").getBytes(StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            throw new InvalidArgumentException("hello: " + e.getMessage(), "hello", null);
        }
    }

    // ---- requests ---------------------------------------------------------

    /**
     * Registers a call on s and writes its line. Throws (nothing registered)
     * when s has ended, and LineTooLong / InvalidArgument for a line the
     * broker would refuse.
     */
    Call send(Session s, String op, Map<String, Object> fields, String lock, Object meta) {
        long id = ids.incrementAndGet();
        StringBuilder sb = new StringBuilder(96);
        sb.append("{\"id\":").append(id).append(",\"op\":");
        try {
            Json.string(sb, op);
            for (Map.Entry<String, Object> e : fields.entrySet()) {
                sb.append(',');
                Json.string(sb, e.getKey());
                sb.append(':');
                Json.write(sb, e.getValue());
            }
        } catch (IllegalArgumentException e) {
            throw new InvalidArgumentException("cannot encode the request: " + e.getMessage(), op, lock);
        }
        sb.append("}\n");
        byte[] line = sb.toString().getBytes(StandardCharsets.UTF_8);
        if (line.length - 1 > s.maxLine) {
            throw new LineTooLongException("the request is " + (line.length - 1) + " bytes, longer than max_line ("
                    + s.maxLine + " bytes)", op, lock);
        }
        Call c = new Call(id, op, lock, fields, meta, s);
        synchronized (mu) {
            if (s.closed) {
                throw disconnected(s, op, lock, null);
            }
            s.pending.put(id, c);
        }
        s.write(line);
        return c;
    }

    /** Sends a request whose answer nobody waits for; errors are dropped. */
    void sendNoWait(Session s, String op, Map<String, Object> fields) {
        try {
            send(s, op, fields, null, null);
        } catch (LockBrokerException e) {
            // the session ended: what the request was for ended with it
        }
    }

    /** One request on the current session, waiting for its answer (interruptibly). */
    private Object call(String op, Map<String, Object> fields, String lock, Function<Map<String, Object>, Object> conv) {
        if (Thread.currentThread().isInterrupted()) {
            throw new CancelledException("the thread was interrupted; nothing was sent", op, lock,
                    new InterruptedException());
        }
        Session s = session(op);
        Call c = send(s, op, fields, lock, null);
        try {
            @SuppressWarnings("unchecked")
            Map<String, Object> r = (Map<String, Object>) c.await();
            return conv.apply(r);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancelledException("the thread was interrupted while waiting for the answer", op, lock, e);
        }
    }

    /** A future completed (on the executor) from a call, that abandons the call when cancelled. */
    private final class FutureCall<T> extends CompletableFuture<T> {
        volatile Call call;

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            boolean done = super.cancel(mayInterruptIfRunning);
            Call c = call;
            if (c != null) {
                abandon(c);
            }
            return done;
        }
    }

    /**
     * A request, asynchronously: on session s (null: the current one,
     * connecting if need be); conv turns the answer into the result.
     */
    <T> CompletableFuture<T> callAsync(Session fixed, String op, Map<String, Object> fields, String lock, Object meta,
            Function<Object, T> conv) {
        FutureCall<T> out = new FutureCall<>();
        CompletableFuture<Session> sf = fixed != null ? CompletableFuture.completedFuture(fixed) : sessionAsync();
        sf.whenComplete((s, e) -> {
            if (e != null) {
                failAsync(out, copyFor(e, op, lock));
                return;
            }
            Call c;
            try {
                c = send(s, op, fields, lock, meta);
            } catch (RuntimeException x) {
                failAsync(out, x);
                return;
            }
            out.call = c;
            if (out.isCancelled()) {
                abandon(c);
                return;
            }
            c.done.whenComplete((r, err) -> executor.execute(() -> {
                if (err != null) {
                    out.completeExceptionally(err);
                    return;
                }
                T v;
                try {
                    v = conv.apply(r);
                } catch (RuntimeException x) {
                    out.completeExceptionally(x);
                    return;
                }
                if (!out.complete(v) && out.isCancelled()) {
                    abandon(c); // cancelled meanwhile: give back a grant
                }
            }));
        });
        return out;
    }

    private void failAsync(CompletableFuture<?> out, Throwable t) {
        executor.execute(() -> out.completeExceptionally(t));
    }

    /**
     * A request about a lease: on its granting session (a bound lease), or
     * the current one (a detached lease). A not_held answer for a lease the
     * broker had not reported lost makes it lost (not_held); a session that
     * ended under it makes it lost (disconnected, already).
     */
    Object leaseCall(Lease h, String op, Map<String, Object> fields, boolean interruptible) {
        LeaseState st = h.st;
        Session s;
        synchronized (mu) {
            s = st.detached ? null : st.session;
        }
        try {
            if (s == null) {
                s = session(op);
            }
            Call c = send(s, op, fields, st.name, null);
            if (!interruptible) {
                return c.awaitUninterruptibly();
            }
            try {
                return c.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new CancelledException("the thread was interrupted while waiting for the answer", op, st.name, e);
            }
        } catch (LeaseLostException e) {
            throw e;
        } catch (NotHeldException e) {
            loseNow(st, REASON_NOT_HELD);
            throw h.lostException(lostReasonOf(st), e);
        } catch (DisconnectedException e) {
            String reason = lostReasonOf(st);
            if (reason != null) {
                throw h.lostException(reason, e);
            }
            throw e;
        }
    }

    <T> CompletableFuture<T> leaseCallAsync(Lease h, String op, Map<String, Object> fields, Function<Object, T> conv) {
        LeaseState st = h.st;
        Session s;
        synchronized (mu) {
            s = st.detached ? null : st.session;
        }
        CompletableFuture<T> f = callAsync(s, op, fields, st.name, null, conv);
        CompletableFuture<T> out = new CompletableFuture<>();
        f.whenComplete((v, e) -> {
            if (e == null) {
                out.complete(v);
                return;
            }
            if (e instanceof NotHeldException && !(e instanceof LeaseLostException)) {
                loseNow(st, REASON_NOT_HELD);
                out.completeExceptionally(h.lostException(lostReasonOf(st), e));
            } else if (e instanceof DisconnectedException && lostReasonOf(st) != null) {
                out.completeExceptionally(h.lostException(lostReasonOf(st), e));
            } else {
                out.completeExceptionally(e);
            }
        });
        return out;
    }

    private String lostReasonOf(LeaseState st) {
        synchronized (mu) {
            return st.lostReason;
        }
    }

    /**
     * The caller of an acquire gave up (interrupted, future cancelled):
     * cancels it at the broker if it still waits, else gives back what it
     * was granted. Once per call.
     */
    void abandon(Call c) {
        if (!c.givenUp.compareAndSet(false, true)) {
            return;
        }
        boolean waiting;
        Object result;
        synchronized (mu) {
            waiting = c.session.pending.get(c.id) == c;
            if (waiting) {
                c.abandoned = true;
            }
            result = c.result;
        }
        if (waiting) {
            if ("acquire".equals(c.op) || "acquire_all".equals(c.op)) {
                Map<String, Object> f = new LinkedHashMap<>();
                f.put("target", c.id);
                sendNoWait(c.session, "cancel", f);
            }
            return;
        }
        List<Lease> granted = new ArrayList<>();
        if (result instanceof Lease) {
            granted.add((Lease) result);
        } else if (result instanceof List) {
            for (Object o : (List<?>) result) {
                if (o instanceof Lease) {
                    granted.add((Lease) o);
                }
            }
        }
        for (Lease l : granted) {
            l.markReleased();
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("lease", l.token());
            sendNoWait(c.session, "release", f);
        }
    }

    DisconnectedException disconnected(Session s, String op, String lock, Throwable cause) {
        if (closed) {
            return new DisconnectedException("the client is closed", op, lock, cause);
        }
        String why = "the connection to " + url + " was lost";
        if (s != null && s.closingReason != null) {
            why += " (the broker closed it: " + s.closingReason + ")";
        } else if (s != null && s.silent != null) {
            why += " (" + s.silent + ")";
        }
        return new DisconnectedException(why, op, lock, cause);
    }

    static LockBrokerException errorOf(Map<String, Object> msg, String op, String lock) {
        Object e = msg.get("error");
        String code = "internal";
        String message = "a failed answer without an error object";
        if (e instanceof Map) {
            Map<?, ?> em = (Map<?, ?>) e;
            if (em.get("code") instanceof String) {
                code = (String) em.get("code");
                message = em.get("message") instanceof String ? (String) em.get("message") : "";
            }
        }
        return LockBrokerException.forCode(code, message, op, lock, null);
    }

    // ---- answers and events (the I/O thread) --------------------------------

    /** Handles one message from the broker. */
    void route(Session s, Object o) {
        if (!(o instanceof Map)) {
            LOG.log(Level.WARNING, "lockbroker: ignoring a line from the broker that is not an object");
            return;
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> msg = (Map<String, Object>) o;
        if (msg.containsKey("event") && !msg.containsKey("id")) {
            onEvent(s, msg);
            return;
        }
        Object id = msg.get("id");
        List<Runnable> posts = new ArrayList<>(0);
        Call c;
        Object result = null;
        LockBrokerException error = null;
        synchronized (mu) {
            c = id instanceof Long ? s.pending.remove(id) : null;
            if (c == null) {
                if (!Boolean.TRUE.equals(msg.get("ok"))) {
                    LockBrokerException e = errorOf(msg, null, null);
                    LOG.log(Level.WARNING, "lockbroker: session {0}: broker error not tied to a request: {1}: {2}",
                            s.number, e.code(), LockBrokerException.printable(e.brokerMessage()));
                }
                return;
            }
            if (Boolean.TRUE.equals(msg.get("ok"))) {
                result = onSuccess(s, c, msg, posts);
            } else {
                error = errorOf(msg, c.op, c.lock);
            }
            c.result = result;
            c.error = error;
        }
        c.finish(result, error);
        post(posts);
    }

    private Object onSuccess(Session s, Call c, Map<String, Object> msg, List<Runnable> posts) {
        switch (c.op) {
            case "acquire":
                return granted(s, c, msg, posts);
            case "acquire_all": {
                List<Lease> handles = new ArrayList<>();
                if (msg.get("leases") instanceof List) {
                    for (Object o : (List<?>) msg.get("leases")) {
                        if (o instanceof Map) {
                            @SuppressWarnings("unchecked")
                            Map<String, Object> m = (Map<String, Object>) o;
                            Lease l = granted(s, c, m, posts);
                            if (l != null) {
                                handles.add(l);
                            }
                        }
                    }
                }
                return Collections.unmodifiableList(handles);
            }
            case "release": {
                LeaseState st = leases.get(c.fields.get("lease"));
                Object n = msg.get("count");
                if (st != null && n instanceof Long) {
                    st.count = (int) (long) (Long) n;
                    if (st.count == 0) {
                        st.done = true;
                        leases.remove(st.token);
                        countTtl(st, null);
                    }
                }
                return msg;
            }
            case "extend": {
                LeaseState st = leases.get(c.fields.get("lease"));
                if (st != null && msg.get("ttl_ms") instanceof Long) {
                    st.ttlMs = (Long) msg.get("ttl_ms");
                    countTtl(st, st.ttlMs);
                }
                return msg;
            }
            case "watch": {
                @SuppressWarnings("unchecked")
                Consumer<Map<String, Object>> sink = (Consumer<Map<String, Object>>) c.meta;
                if (sink != null && msg.get("watch") instanceof String) {
                    watches.put((String) msg.get("watch"), new WatchEntry(s, sink));
                    sink.accept(msg); // the state now, before any changed event
                }
                return msg;
            }
            default:
                return msg;
        }
    }

    /** A grant in an acquire's (or acquire_all's) answer: its lease handle; null when nobody waits. */
    private Lease granted(Session s, Call c, Map<String, Object> msg, List<Runnable> posts) {
        AcquireMeta meta = (AcquireMeta) c.meta;
        String token = String.valueOf(msg.get("lease"));
        int count = Lease.intOf(msg.get("count"));
        LeaseState st = leases.get(token);
        if (st == null || st.done || st.lostReason != null) {
            String name = msg.get("lock") instanceof String ? (String) msg.get("lock") : meta.name;
            st = new LeaseState(token, name, String.valueOf(msg.get("mode")), Lease.longOf(msg.get("fence")),
                    Lease.longOf(msg.get("ttl_ms")), count, meta.detached, meta.owner, s);
            leases.put(token, st);
        } else {
            st.count = count;
            if (msg.get("ttl_ms") instanceof Long) {
                st.ttlMs = (Long) msg.get("ttl_ms");
            }
        }
        countTtl(st, st.ttlMs);
        if (c.abandoned) {
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("lease", token);
            posts.add(() -> sendNoWait(s, "release", f));
            return null;
        }
        Lease h = new Lease(this, st, count);
        if (meta.onLost != null) {
            st.watchers.add(new LeaseState.Watcher(h, meta.onLost));
        }
        return h;
    }

    private void onEvent(Session s, Map<String, Object> msg) {
        Object event = msg.get("event");
        if ("lost".equals(event)) {
            List<Runnable> posts;
            synchronized (mu) {
                LeaseState st = leases.get(msg.get("lease"));
                if (st == null || (st.session != s && !st.detached)) {
                    return;
                }
                Object reason = msg.get("reason");
                posts = lose(st, reason instanceof String ? (String) reason : "unknown");
            }
            post(posts);
        } else if ("changed".equals(event)) {
            WatchEntry e;
            synchronized (mu) {
                e = watches.get(msg.get("watch"));
            }
            if (e != null && e.session == s) {
                e.sink.accept(msg);
            }
        } else if ("closing".equals(event)) {
            s.closingReason = String.valueOf(msg.get("reason"));
        }
        // Other events need nothing: after "shutdown" the broker refuses new
        // acquires itself and ends the session with "closing"; "half_closed"
        // cannot happen (the client never half-closes); newer ones are ignored.
    }

    /** (Under mu.) Marks a lease lost; returns its callbacks to post. */
    private List<Runnable> lose(LeaseState st, String reason) {
        if (st.lostReason != null || st.done) {
            return List.of();
        }
        st.lostReason = reason;
        countTtl(st, null);
        if (leases.get(st.token) == st) {
            leases.remove(st.token);
        }
        st.lost.complete(reason);
        List<Runnable> posts = new ArrayList<>(st.watchers.size());
        for (LeaseState.Watcher w : st.watchers) {
            if (!w.handle.isReleased()) {
                posts.add(() -> w.fn.accept(w.handle));
            }
        }
        st.watchers.clear();
        return posts;
    }

    /** Marks a lease lost from a caller's thread (after not_held). */
    private void loseNow(LeaseState st, String reason) {
        List<Runnable> posts;
        synchronized (mu) {
            posts = lose(st, reason);
        }
        post(posts);
    }

    void watchLoss(Lease h, Consumer<Lease> fn) {
        boolean lost;
        synchronized (mu) {
            lost = h.st.lostReason != null;
            if (!lost) {
                h.st.watchers.add(new LeaseState.Watcher(h, fn));
            }
        }
        if (lost) {
            post(List.of(() -> fn.accept(h)));
        }
    }

    /** Runs each on the callback thread, after the ones posted before; a failure is logged. */
    void post(List<Runnable> tasks) {
        for (Runnable r : tasks) {
            try {
                callbacks.execute(() -> {
                    try {
                        r.run();
                    } catch (RuntimeException e) {
                        LOG.log(Level.WARNING, "lockbroker: a callback threw", e);
                    }
                });
            } catch (java.util.concurrent.RejectedExecutionException e) {
                // the client is closed and its callback thread done: run it here
                try {
                    r.run();
                } catch (RuntimeException x) {
                    LOG.log(Level.WARNING, "lockbroker: a callback threw", x);
                }
            }
        }
    }

    /**
     * (The I/O thread, at the end of its connection.) Fails the session's
     * pending calls and loses its leases, in the same hold of mu that marks
     * it closed; detached leases are unbound (later calls about them go
     * through the next session); watches are told (null).
     */
    void sessionEnded(Session s, Throwable cause) {
        List<Call> failed;
        List<Runnable> posts = new ArrayList<>();
        List<Consumer<Map<String, Object>>> sinks = new ArrayList<>();
        synchronized (mu) {
            if (s.closed) {
                return;
            }
            s.closed = true;
            if (current == s) {
                current = null;
                if (!closed) {
                    failures = 0;
                    nextAttempt = 0;
                }
                if (livenessTask != null) {
                    livenessTask.cancel(false);
                    livenessTask = null;
                    livenessAt = Long.MAX_VALUE;
                }
            }
            if (closed) {
                s.endReason = REASON_CLOSED;
            }
            failed = new ArrayList<>(s.pending.values());
            s.pending.clear();
            for (Call c : failed) {
                c.error = disconnected(s, c.op, c.lock, cause);
            }
            for (Iterator<LeaseState> it = leases.values().iterator(); it.hasNext();) {
                LeaseState st = it.next();
                if (st.session != s) {
                    continue;
                }
                if (st.detached) {
                    st.session = null;
                } else {
                    it.remove();
                    posts.addAll(lose(st, s.endReason));
                }
            }
            for (Iterator<WatchEntry> it = watches.values().iterator(); it.hasNext();) {
                WatchEntry e = it.next();
                if (e.session == s) {
                    it.remove();
                    sinks.add(e.sink);
                }
            }
        }
        if (cause != null && !(cause instanceof java.nio.channels.ClosedChannelException)) {
            LOG.log(Level.DEBUG, "lockbroker: session {0} ended: {1}", s.number, cause.toString());
        }
        for (Call c : failed) {
            c.finish(null, c.error);
        }
        for (Consumer<Map<String, Object>> sink : sinks) {
            sink.accept(null); // a Watch's queue: it watches again on the next session
        }
        post(posts);
    }

    /** Unregisters a watch (its Watch was closed). */
    void forgetWatch(String id) {
        synchronized (mu) {
            watches.remove(id);
        }
    }

    // ---- liveness -----------------------------------------------------------

    /**
     * (Under mu.) Makes st count in its session's bound with ttl (its TTL
     * now), or no more with null; re-plans when the bound shrinks. Detached
     * leases never count: they outlive the session.
     */
    private void countTtl(LeaseState st, Long ttl) {
        Session s = st.session;
        if (st.counted != null && s != null) {
            Integer n = s.ttls.get(st.counted);
            if (n != null) {
                if (n <= 1) {
                    s.ttls.remove(st.counted);
                } else {
                    s.ttls.put(st.counted, n - 1);
                }
            }
        }
        st.counted = null;
        if (st.detached || s == null || ttl == null || ttl <= 0) {
            return;
        }
        boolean shrunk = s.ttls.isEmpty() || ttl < s.ttls.firstKey();
        s.ttls.merge(ttl, 1, Integer::sum);
        st.counted = ttl;
        if (shrunk) {
            replan(s);
        }
    }

    /**
     * (Under mu.) How long the broker may stay silent on s before the client
     * gives it up, in ms; null when it is not watched.
     */
    private Long boundMs(Session s) {
        Long ka = opts.keepalive != null ? LockOptions.millis(opts.keepalive) : null;
        if (!opts.liveness || s.ttls.isEmpty()) {
            return ka;
        }
        long b = ka != null ? ka : ClientOptions.DEFAULT_LIVENESS_BOUND.toMillis();
        b = Math.min(b, s.ttls.firstKey() / 3);
        return Math.max(b, 1);
    }

    /**
     * (Under mu.) s just opened, its bound shrank, or a ping was answered:
     * runs the check sooner if it is due sooner than planned.
     */
    private void replan(Session s) {
        if (s != current || s.closed || closed) {
            return;
        }
        Long bound = boundMs(s);
        if (bound == null) {
            return;
        }
        long at = s.lastRecv + TimeUnit.MILLISECONDS.toNanos(bound) / 3;
        if (at < livenessAt) {
            schedule(at);
        }
    }

    private void schedule(long at) {
        if (livenessTask != null) {
            livenessTask.cancel(false);
        }
        livenessAt = at;
        try {
            livenessTask = timer.schedule(this::livenessCheck, Math.max(0, at - System.nanoTime()),
                    TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            livenessTask = null; // closing
        }
    }

    /** (The I/O thread, on the first read after a ping.) */
    void pingAnswered(Session s) {
        synchronized (mu) {
            if (s.pingInFlight) {
                s.pingInFlight = false;
                replan(s);
            }
        }
    }

    /**
     * The liveness check of the current session (timer thread): gives the
     * session up when the broker has said nothing for the bound, pings when
     * it has been quiet for a third of it (one ping in flight at most; with
     * keepalive also when the client has been quiet), and plans the next
     * check.
     */
    private void livenessCheck() {
        Session ping = null;
        Session dead = null;
        long silentMs = 0;
        long boundMs = 0;
        synchronized (mu) {
            livenessTask = null;
            livenessAt = Long.MAX_VALUE;
            Session s = current;
            if (s == null || s.closed || closed) {
                return;
            }
            Long bound = boundMs(s);
            if (bound == null) {
                return; // re-planned when a lease is held again
            }
            long now = System.nanoTime();
            long b = TimeUnit.MILLISECONDS.toNanos(bound);
            long deadAt = s.lastRecv + b;
            if (now - deadAt >= 0) {
                silentMs = TimeUnit.NANOSECONDS.toMillis(now - s.lastRecv);
                boundMs = bound;
                s.silent = "liveness check: the broker sent nothing for " + silentMs + " ms (bound " + bound + " ms)";
                dead = s;
            } else {
                long at = deadAt;
                if (!s.pingInFlight) {
                    long pingAt = s.lastRecv + b / 3;
                    if (opts.keepalive != null) {
                        pingAt = Math.min(pingAt, s.lastSend + TimeUnit.MILLISECONDS.toNanos(
                                LockOptions.millis(opts.keepalive)) / 3);
                    }
                    if (now - pingAt >= 0) {
                        s.pingInFlight = true;
                        ping = s;
                    } else {
                        at = Math.min(at, pingAt);
                    }
                }
                schedule(at);
            }
        }
        if (dead != null) {
            LOG.log(Level.WARNING, "lockbroker: session {0}: the broker sent nothing for {1} ms (bound {2} ms): "
                    + "giving the session up, its leases are lost", dead.number, silentMs, boundMs);
            dead.kill(null);
        } else if (ping != null) {
            sendNoWait(ping, "ping", new LinkedHashMap<>());
        }
    }

    // ---- the default label ---------------------------------------------------

    /**
     * The client label sent in hello unless ClientOptions.clientName, the same
     * shape in every client: PROGRAM[PID]@HOST lockbroker-java/VERSION.
     */
    static String defaultLabel() {
        String prog = "java";
        String cmd = System.getProperty("sun.java.command");
        if (cmd != null && !cmd.isBlank()) {
            String first = cmd.trim().split("\\s+")[0];
            int slash = Math.max(first.lastIndexOf('/'), first.lastIndexOf('\\'));
            first = first.substring(slash + 1);
            if (!first.endsWith(".jar") && !first.endsWith(".java")) {
                first = first.substring(first.lastIndexOf('.') + 1);
            }
            if (!first.isEmpty()) {
                prog = first;
            }
        }
        String host = "-";
        try {
            Path p = Path.of("/proc/sys/kernel/hostname");
            if (Files.isReadable(p)) {
                host = Files.readString(p).trim();
            } else {
                host = InetAddress.getLocalHost().getHostName();
            }
        } catch (IOException | RuntimeException e) {
            // keep "-"
        }
        if (host.isEmpty()) {
            host = "-";
        }
        return cut(prog) + "[" + ProcessHandle.current().pid() + "]@" + cut(host) + " lockbroker-java/" + VERSION;
    }

    private static String cut(String s) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < s.length() && sb.length() < 40; i++) {
            char c = s.charAt(i);
            if (c >= 0x20 && c < 0x7F) {
                sb.append(c);
            }
        }
        return sb.toString();
    }
}
