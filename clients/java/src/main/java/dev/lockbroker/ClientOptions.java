package dev.lockbroker;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.Executor;

/**
 * How a {@link LockBrokerClient} connects and behaves. Immutable: each
 * method returns a changed copy.
 *
 * <pre>{@code
 * ClientOptions o = ClientOptions.defaults()
 *         .authFile(Path.of("/etc/lockbroker/secret"))
 *         .clientName("billing-worker/1.4")
 *         .keepalive(Duration.ofSeconds(5));
 * }</pre>
 */
public final class ClientOptions implements Cloneable {
    /** How long a call may wait for a session (see {@link #connectTimeout}). */
    public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(5);
    /** The delay after the first failed connect; it doubles after each. */
    public static final Duration DEFAULT_BACKOFF_MIN = Duration.ofMillis(50);
    /** The longest delay between failed connects. */
    public static final Duration DEFAULT_BACKOFF_MAX = Duration.ofSeconds(2);
    /**
     * The longest silence of the broker that the liveness check tolerates
     * while a lease is held, when no keepalive is given.
     */
    public static final Duration DEFAULT_LIVENESS_BOUND = Duration.ofSeconds(5);

    String auth;
    Path authFile;
    String clientName;
    Duration keepalive;
    boolean liveness = true;
    Duration connectTimeout = DEFAULT_CONNECT_TIMEOUT;
    Duration backoffMin = DEFAULT_BACKOFF_MIN;
    Duration backoffMax = DEFAULT_BACKOFF_MAX;
    String owner;
    Executor executor;

    private ClientOptions() {}

    /** The defaults: no secret, the default label, liveness check on, no keepalive. */
    public static ClientOptions defaults() {
        return new ClientOptions();
    }

    private ClientOptions copy() {
        try {
            return (ClientOptions) super.clone();
        } catch (CloneNotSupportedException e) {
            throw new AssertionError(e);
        }
    }

    /** The secret hello presents to a broker run with {@code --auth-file}. */
    public ClientOptions auth(String secret) {
        ClientOptions o = copy();
        o.auth = Objects.requireNonNull(secret, "secret");
        o.authFile = null;
        return o;
    }

    /**
     * Reads the secret from a file at every connect; as the broker does, one
     * trailing {@code \n} or {@code \r\n} is not part of it.
     */
    public ClientOptions authFile(Path path) {
        ClientOptions o = copy();
        o.authFile = Objects.requireNonNull(path, "path");
        o.auth = null;
        return o;
    }

    /**
     * The label (at most 128 bytes) that {@code inspect} shows for this
     * client's holders. Default: {@code PROGRAM[PID]@HOST lockbroker-java/VERSION}.
     */
    public ClientOptions clientName(String label) {
        ClientOptions o = copy();
        o.clientName = Objects.requireNonNull(label, "label");
        return o;
    }

    /**
     * Liveness both ways: the broker ends the session when it hears nothing
     * from the client for {@code d} (500 ms..10 min), and the client pings
     * every d/3, idle sessions included; d also caps the client's own
     * liveness bound (see {@link #livenessCheck}). Off by default.
     */
    public ClientOptions keepalive(Duration d) {
        ClientOptions o = copy();
        o.keepalive = Objects.requireNonNull(d, "keepalive");
        return o;
    }

    /**
     * The client's own check that the broker is alive while a lease is held
     * (on by default). While the session holds a lease bound to it, a broker
     * silent for longer than the bound (a third of the shortest TTL held, at
     * most the keepalive or {@link #DEFAULT_LIVENESS_BOUND}) is taken as
     * gone: the connection is dropped and every lease of the session is
     * lost ({@code disconnected}) before Redis can give it to someone else.
     * The client pings when the broker has been quiet for a third of the
     * bound. Off: a frozen broker leaves the holder believing it holds its
     * leases until the broker runs again or the connection closes.
     */
    public ClientOptions livenessCheck(boolean on) {
        ClientOptions o = copy();
        o.liveness = on;
        return o;
    }

    /**
     * How long a call may wait for a session (default 5 s): one connect,
     * hello included; and, once the client had a session, the attempts
     * after a failed one (the broker restarting), with the backoff between
     * them. Before the first session, a refused connect fails at once.
     */
    public ClientOptions connectTimeout(Duration d) {
        if (d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException("connectTimeout must be positive");
        }
        ClientOptions o = copy();
        o.connectTimeout = d;
        return o;
    }

    /**
     * The delays between failed connects: {@code min} after the first
     * failure, doubling up to {@code max} (defaults 50 ms and 2 s), each
     * with +-20% jitter. The first connect after a dropped connection is
     * made at once.
     */
    public ClientOptions backoff(Duration min, Duration max) {
        if (min.isNegative() || min.isZero() || max.compareTo(min) < 0) {
            throw new IllegalArgumentException("backoff wants 0 < min <= max");
        }
        ClientOptions o = copy();
        o.backoffMin = min;
        o.backoffMax = max;
        return o;
    }

    /**
     * One reentrancy owner (at most 128 bytes) for every acquire of this
     * client, instead of one per thread: every thread then re-enters every
     * other thread's locks. Rarely what you want.
     */
    public ClientOptions owner(String owner) {
        ClientOptions o = copy();
        o.owner = Objects.requireNonNull(owner, "owner");
        return o;
    }

    /**
     * Where the futures of the asynchronous calls ({@code lockAsync}, ...)
     * are completed, so where their dependent stages run. Default:
     * {@code CompletableFuture}'s default asynchronous executor.
     */
    public ClientOptions executor(Executor executor) {
        ClientOptions o = copy();
        o.executor = Objects.requireNonNull(executor, "executor");
        return o;
    }
}
