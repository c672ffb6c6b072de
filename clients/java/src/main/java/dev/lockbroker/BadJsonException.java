package dev.lockbroker;

/** Code {@code bad_json}: the line is not valid JSON (the client never sends one). */
public class BadJsonException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "bad_json";

    public BadJsonException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public BadJsonException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected BadJsonException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
