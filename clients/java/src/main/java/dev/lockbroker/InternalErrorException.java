package dev.lockbroker;

/** Code {@code internal}: a bug in the broker; the message says what. */
public class InternalErrorException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "internal";

    public InternalErrorException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public InternalErrorException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected InternalErrorException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
