package dev.lockbroker;

/** Code {@code upgrade_unsupported}: a shared holder asked the same lock exclusive with the same owner (it would deadlock). */
public class UpgradeUnsupportedException extends LockBrokerException {
    private static final long serialVersionUID = 1L;

    /** The protocol's code of this class. */
    public static final String CODE = "upgrade_unsupported";

    public UpgradeUnsupportedException(String message, String op, String lock) {
        super(CODE, message, op, lock);
    }

    public UpgradeUnsupportedException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }

    /** For a subclass of another code. */
    protected UpgradeUnsupportedException(String code, String message, String op, String lock, Throwable cause) {
        super(code, message, op, lock, cause);
    }
}
