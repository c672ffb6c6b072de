package dev.lockbroker;

/** Code {@code cancelled}: a pending acquire was cancelled: by the broker's {@code cancel}, a cancelled {@code CompletableFuture}, or the calling thread's interrupt (then the cause is an {@link InterruptedException} and the thread's interrupt status is kept). */
public class CancelledException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "cancelled";

    public CancelledException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public CancelledException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected CancelledException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
