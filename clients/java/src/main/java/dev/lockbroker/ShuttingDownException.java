package dev.lockbroker;

/** Code {@code shutting_down}: the broker is stopping and takes no new acquisitions. */
public class ShuttingDownException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "shutting_down";

    public ShuttingDownException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public ShuttingDownException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected ShuttingDownException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
