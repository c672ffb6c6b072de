package dev.lockbroker;

/** Code {@code unauthorized}: the broker wants a secret and this session has not passed {@code hello} with a valid one. */
public class UnauthorizedException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "unauthorized";

    public UnauthorizedException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public UnauthorizedException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected UnauthorizedException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
