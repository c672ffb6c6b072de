package dev.lockbroker;

/** Code {@code invalid_argument}: a field is missing, of the wrong type, out of range, or unknown; also a request the client refuses to send for the same reasons (text that is not valid Unicode, a bad URL). */
public class InvalidArgumentException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "invalid_argument";

    public InvalidArgumentException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public InvalidArgumentException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected InvalidArgumentException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
