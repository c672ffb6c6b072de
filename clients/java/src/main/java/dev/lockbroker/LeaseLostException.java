package dev.lockbroker;

/**
 * The client's own code {@code lost}: a lease this client held is lost, and
 * whoever holds it must stop using the resource at once. Thrown by the
 * lease's calls once it is lost ({@link Lease#fence()}, {@link Lease#check()},
 * {@link Lease#release()}, {@link Lease#extend}), and by leaving its
 * try-with-resources block ({@link Lease#close()}) or
 * {@link LockBrokerClient#withLock}. A {@link NotHeldException}.
 *
 * <p>{@link #reason()}: the broker's ({@code expired}, {@code gone},
 * {@code redis_unavailable}, {@code max_hold}, or a newer broker's) or the
 * client's ({@code disconnected}: the session's connection ended;
 * {@code closed}: the client was closed; {@code not_held}: a release or
 * extend was answered {@code not_held} for a lease the broker had not
 * reported lost, that answer being the cause).
 */
public class LeaseLostException extends NotHeldException {
    private static final long serialVersionUID = 1L;

    /** The client's code of this class. */
    public static final String CODE = "lost";

    private final transient Lease lease;
    private final String reason;

    public LeaseLostException(Lease lease, String reason, Throwable cause) {
        super(CODE, "the lease of \"" + printable(lease.name()) + "\" was lost (reason: " + reason + ")",
                null, lease.name(), cause);
        this.lease = lease;
        this.reason = reason;
    }

    /** The lease that was lost. */
    public Lease lease() {
        return lease;
    }

    /** Why (see the class comment). */
    public String reason() {
        return reason;
    }
}
