package dev.lockbroker;

/** Code {@code line_too_long}: the request is longer than the broker's {@code max_line}; the client refuses to send such a line and throws this instead. */
public class LineTooLongException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "line_too_long";

    public LineTooLongException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public LineTooLongException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected LineTooLongException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
