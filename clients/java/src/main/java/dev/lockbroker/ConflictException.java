package dev.lockbroker;

/** Code {@code conflict}: the name has holders or waiters of another kind (lock vs semaphore, or another {@code limit}). */
public class ConflictException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "conflict";

    public ConflictException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public ConflictException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected ConflictException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
