package dev.lockbroker;

/** Code {@code limit_exceeded}: a per-session or per-broker limit was hit (leases, waiters, watches, connections). */
public class LimitExceededException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "limit_exceeded";

    public LimitExceededException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public LimitExceededException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected LimitExceededException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
