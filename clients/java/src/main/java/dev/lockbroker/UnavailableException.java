package dev.lockbroker;

/** Code {@code unavailable}: Redis cannot be reached or answered with an error; the request had no effect. The client's {@link DisconnectedException} is one too. */
public class UnavailableException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "unavailable";

    public UnavailableException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public UnavailableException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected UnavailableException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
