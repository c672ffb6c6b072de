package dev.lockbroker;

/** Code {@code unknown_op}: {@code op} is not an op of the protocol (this broker's). */
public class UnknownOpException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "unknown_op";

    public UnknownOpException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public UnknownOpException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected UnknownOpException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
