package dev.lockbroker;

/** Code {@code not_held}: the lease is unknown, released, expired or lost. A lease this client held comes as its subclass {@link LeaseLostException}. */
public class NotHeldException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "not_held";

    public NotHeldException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public NotHeldException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected NotHeldException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
