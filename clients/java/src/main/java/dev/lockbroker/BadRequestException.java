package dev.lockbroker;

/** Code {@code bad_request}: not an object, or {@code op} missing or not a string. */
public class BadRequestException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "bad_request";

    public BadRequestException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public BadRequestException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected BadRequestException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
