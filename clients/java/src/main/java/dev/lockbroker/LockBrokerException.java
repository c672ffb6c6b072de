package dev.lockbroker;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * An error of the lockbroker client: every exception this library throws is
 * one. Errors answered by the broker carry the protocol's {@link #code()}
 * and come as the subclass of that code (one per row of the protocol's
 * "Error codes" table: {@link LockTimeoutException} for {@code timeout},
 * {@link NotHeldException} for {@code not_held}, ...). A code this version
 * does not know arrives as a plain {@code LockBrokerException} carrying it.
 * The client's own errors are {@link DisconnectedException} (code
 * {@code disconnected}, an {@link UnavailableException}) and
 * {@link LeaseLostException} (code {@code lost}, a {@link NotHeldException}).
 * A request the client refuses to send comes as the exception of the code
 * the broker would have answered ({@link LineTooLongException},
 * {@link InvalidArgumentException}).
 *
 * <p>Unchecked, as in {@code java.util.concurrent.locks}: a caller handles
 * the codes it expects ({@code catch (LockTimeoutException e)}) and lets the
 * others go up.
 */
public class LockBrokerException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String code;
    private final String brokerMessage;
    private final String op;
    private final String lock;

    /**
     * @param code the protocol's error code
     * @param message the broker's message (or the client's own text)
     * @param op the request's op, null if none
     * @param lock the lock's name for ops that name one, else null
     */
    public LockBrokerException(String code, String message, String op, String lock) {
        this(code, message, op, lock, null);
    }

    public LockBrokerException(String code, String message, String op, String lock, Throwable cause) {
        super(format(code, message, op, lock), cause);
        this.code = code;
        this.brokerMessage = message;
        this.op = op;
        this.lock = lock;
    }

    private static String format(String code, String message, String op, String lock) {
        StringBuilder sb = new StringBuilder();
        if (op != null) {
            sb.append(op);
            if (lock != null) {
                sb.append(" \"").append(printable(lock)).append('"');
            }
            sb.append(": ");
        }
        return sb.append(code).append(": ").append(message).toString();
    }

    /** s cut to 80 chars with its control characters masked, for a message. */
    static String printable(String s) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < s.length() && i < 80; i++) {
            char c = s.charAt(i);
            sb.append(c < 0x20 || c == 0x7F ? '?' : c);
        }
        if (s.length() > 80) {
            sb.append("...");
        }
        return sb.toString();
    }

    /** The protocol's error code ("timeout", "not_held", ...), or the client's own. */
    public String code() {
        return code;
    }

    /** The broker's message, unchanged (for the client's own errors, its text). */
    public String brokerMessage() {
        return brokerMessage;
    }

    /** The op of the request that failed, null if none. */
    public String op() {
        return op;
    }

    /** The lock's name for ops that name one, else null. */
    public String lock() {
        return lock;
    }

    // ---- one class per code -----------------------------------------------

    @FunctionalInterface
    interface Maker {
        LockBrokerException make(String message, String op, String lock, Throwable cause);
    }

    private static final Map<String, Maker> CODES;

    static {
        Map<String, Maker> m = new LinkedHashMap<>();
        m.put(BadJsonException.CODE, BadJsonException::new);
        m.put(BadRequestException.CODE, BadRequestException::new);
        m.put(LineTooLongException.CODE, LineTooLongException::new);
        m.put(UnknownOpException.CODE, UnknownOpException::new);
        m.put(InvalidArgumentException.CODE, InvalidArgumentException::new);
        m.put(UnauthorizedException.CODE, UnauthorizedException::new);
        m.put(LockTimeoutException.CODE, LockTimeoutException::new);
        m.put(CancelledException.CODE, CancelledException::new);
        m.put(NotHeldException.CODE, NotHeldException::new);
        m.put(ConflictException.CODE, ConflictException::new);
        m.put(UpgradeUnsupportedException.CODE, UpgradeUnsupportedException::new);
        m.put(LimitExceededException.CODE, LimitExceededException::new);
        m.put(UnavailableException.CODE, UnavailableException::new);
        m.put(ShuttingDownException.CODE, ShuttingDownException::new);
        m.put(InternalErrorException.CODE, InternalErrorException::new);
        CODES = Collections.unmodifiableMap(m);
    }

    /** The protocol's error codes this version knows, each with a class of its own. */
    public static Set<String> knownCodes() {
        return CODES.keySet();
    }

    /**
     * The exception of a code: its class for a known code, a plain
     * LockBrokerException carrying it for another.
     */
    public static LockBrokerException forCode(String code, String message, String op, String lock) {
        return forCode(code, message, op, lock, null);
    }

    /** {@link #forCode(String, String, String, String)} with a cause. */
    public static LockBrokerException forCode(String code, String message, String op, String lock, Throwable cause) {
        Maker mk = CODES.get(code);
        if (mk == null) {
            return new LockBrokerException(code, message, op, lock, cause);
        }
        return mk.make(message, op, lock, cause);
    }
}
