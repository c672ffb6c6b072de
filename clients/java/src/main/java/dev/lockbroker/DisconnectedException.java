package dev.lockbroker;

/**
 * The client's own code {@code disconnected}: there is no session. The
 * broker could not be reached (refused, unreachable, hello not answered
 * within the connect timeout), the connection ended while the request was
 * pending, or the client was closed. An {@link UnavailableException}: the
 * request had no effect that the client knows of (a release or extend whose
 * connection ended may still have reached the broker). The next request
 * connects again (see {@link ClientOptions#backoff}).
 */
public class DisconnectedException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    /** The client's code of this class. */
    public static final String CODE = "disconnected";

    public DisconnectedException(String message, String op, String lock) {
        super(CODE, message, op, lock, null);
    }

    public DisconnectedException(String message, String op, String lock, Throwable cause) {
        super(CODE, message, op, lock, cause);
    }
}
