package dev.lockbroker;

/** Code {@code timeout}: the lock could not be granted within the wait ({@code waitTime}); {@link LockBrokerClient#tryLock} returns null instead. */
public class LockTimeoutException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "timeout";

    public LockTimeoutException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public LockTimeoutException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected LockTimeoutException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
