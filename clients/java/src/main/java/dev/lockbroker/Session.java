package dev.lockbroker;

// Session - one connection to the broker, i.e. one broker session.
//
// open() connects and passes hello on the connecting thread, before anyone
// else sees the session; start() then runs its I/O thread
// ("lockbroker-io-N"), which reads lines, hands each to the client's
// router (LockBrokerClient.route), flushes what callers could not write at
// once, and, when the connection ends, tears the session down
// (LockBrokerClient.sessionEnded: pending calls failed, leases lost).
//
// The channel is non-blocking, always. A blocking NIO channel is closed by
// an interrupt of a thread that uses it, which would end the session and
// lose every lease because one caller was interrupted; a non-blocking one
// is not. So callers write their own lines (write(): straight to the
// socket while nothing is queued, else queued for the I/O thread, which
// asks the selector for OP_WRITE), and only the I/O thread reads.
//
// Ownership: the I/O thread owns the read side and closes the channel and
// the selector at its end; anyone may kill() the session (mark it and wake
// the selector). Fields under client.mu are marked so; the write queue is
// under wmu, never taken with client.mu held by the same thread the other
// way round (write() is called without client.mu).

import java.io.IOException;
import java.net.ConnectException;
import java.net.SocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.channels.UnresolvedAddressException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

final class Session {
    /** Bounds one line from the broker (a leases answer of 10000 leases is about 1.3 MB). */
    static final int MAX_INCOMING = 64 << 20;
    static final int DEFAULT_MAX_LINE = 65536;

    final LockBrokerClient c;
    final int number;
    private final SocketChannel ch;
    private final Selector selector;
    private final SelectionKey key;
    private final LineReader lines = new LineReader();

    /** hello's answer; null when hello was refused for want of a secret (see open). */
    Map<String, Object> info;
    int maxLine = DEFAULT_MAX_LINE;

    // ---- under c.mu ----
    final HashMap<Long, Call> pending = new HashMap<>();
    boolean closed;
    String endReason = LockBrokerClient.REASON_DISCONNECTED;
    String silent; // why the client gave the broker up (liveness), for messages
    final TreeMap<Long, Integer> ttls = new TreeMap<>(); // ttl_ms -> bound leases with it
    volatile boolean pingInFlight; // written under c.mu; read without it by the I/O thread

    volatile String closingReason; // the broker's "closing" event
    volatile long lastRecv; // System.nanoTime() of the last bytes read
    volatile long lastSend; // ... of the last line written
    private volatile boolean killed;
    private Throwable killCause;
    private final CountDownLatch ended = new CountDownLatch(1);

    // ---- under wmu ----
    private final Object wmu = new Object();
    private byte[] out = new byte[0];
    private int outStart;
    private int outEnd;

    private Session(LockBrokerClient c, int number, SocketChannel ch, Selector selector, SelectionKey key) {
        this.c = c;
        this.number = number;
        this.ch = ch;
        this.selector = selector;
        this.key = key;
        this.lastRecv = this.lastSend = System.nanoTime();
    }

    // ---- opening ------------------------------------------------------------

    /**
     * Connects to the broker and passes hello, within the connect timeout.
     * helloLine is the hello request (id 0). Without a secret (withSecret
     * false), an unauthorized answer still opens the session, as lockctl
     * and the other clients do: ping works, every other op answers
     * unauthorized by itself.
     */
    static Session open(LockBrokerClient c, int number, byte[] helloLine, boolean withSecret) {
        long deadline = System.nanoTime() + c.opts.connectTimeout.toNanos();
        SocketChannel ch = null;
        Selector sel = null;
        boolean ok = false;
        try {
            SocketAddress addr;
            try {
                addr = c.address.address();
            } catch (IllegalArgumentException | SecurityException e) {
                throw c.cannotConnect(e.getMessage(), e);
            }
            ch = c.address.unix ? SocketChannel.open(StandardProtocolFamily.UNIX) : SocketChannel.open();
            ch.configureBlocking(false);
            if (!c.address.unix) {
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            }
            sel = Selector.open();
            SelectionKey key;
            boolean connected;
            try {
                connected = ch.connect(addr);
            } catch (UnresolvedAddressException e) {
                throw c.cannotConnect("cannot resolve " + c.address.host, e);
            }
            if (!connected) {
                key = ch.register(sel, SelectionKey.OP_CONNECT);
                while (!ch.finishConnect()) {
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        throw c.cannotConnect("connect timed out", null);
                    }
                    sel.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
                    sel.selectedKeys().clear();
                }
                key.interestOps(SelectionKey.OP_READ);
            } else {
                key = ch.register(sel, SelectionKey.OP_READ);
            }
            Session s = new Session(c, number, ch, sel, key);
            s.hello(helloLine, withSecret, deadline);
            ok = true;
            return s;
        } catch (IOException e) {
            String what = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
            if (e instanceof ConnectException && what.isEmpty()) {
                what = "connection refused";
            }
            throw c.cannotConnect(what, e);
        } finally {
            if (!ok) {
                closeQuietly(ch, sel);
            }
        }
    }

    private static void closeQuietly(SocketChannel ch, Selector sel) {
        try {
            if (sel != null) {
                sel.close();
            }
        } catch (IOException e) {
            // nothing to do
        }
        try {
            if (ch != null) {
                ch.close();
            }
        } catch (IOException e) {
            // nothing to do
        }
    }

    private void hello(byte[] line, boolean withSecret, long deadline) throws IOException {
        ByteBuffer bb = ByteBuffer.wrap(line);
        ByteBuffer rb = ByteBuffer.allocate(16 << 10);
        while (bb.hasRemaining()) {
            ch.write(bb);
            if (bb.hasRemaining()) {
                key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                waitReady(deadline);
            }
        }
        key.interestOps(SelectionKey.OP_READ);
        for (;;) {
            rb.clear();
            int n = ch.read(rb);
            if (n < 0) {
                String why = closingReason != null ? "the broker closed the connection (" + closingReason + ")"
                        : "the broker closed the connection during hello";
                throw c.cannotConnect(why, null);
            }
            if (n == 0) {
                waitReady(deadline);
                continue;
            }
            List<Object> msgs;
            try {
                msgs = lines.feed(rb.array(), 0, n);
            } catch (Json.JsonException e) {
                throw c.cannotConnect("hello: bad answer: " + e.getMessage(), e);
            }
            for (int i = 0; i < msgs.size(); i++) {
                Object o = msgs.get(i);
                if (!(o instanceof Map)) {
                    continue;
                }
                @SuppressWarnings("unchecked")
                Map<String, Object> m = (Map<String, Object>) o;
                if (m.containsKey("event") && !m.containsKey("id")) {
                    if ("closing".equals(m.get("event"))) {
                        closingReason = String.valueOf(m.get("reason"));
                    }
                    continue;
                }
                if (!Long.valueOf(0).equals(m.get("id"))) {
                    continue;
                }
                // Anything after the answer stays in the reader for the I/O thread.
                lines.unread(msgs.subList(i + 1, msgs.size()));
                if (Boolean.TRUE.equals(m.get("ok"))) {
                    info = m;
                    Object limits = m.get("limits");
                    if (limits instanceof Map) {
                        Object ml = ((Map<?, ?>) limits).get("max_line");
                        if (ml instanceof Long && (Long) ml > 0 && (Long) ml <= Integer.MAX_VALUE) {
                            maxLine = (int) (long) (Long) ml;
                        }
                    }
                    return;
                }
                LockBrokerException err = LockBrokerClient.errorOf(m, "hello", null);
                if (!withSecret && UnauthorizedException.CODE.equals(err.code())) {
                    return; // no info: the session is open, hello was refused
                }
                throw err;
            }
        }
    }

    private void waitReady(long deadline) throws IOException {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
            throw c.cannotConnect("hello not answered within the connect timeout", null);
        }
        selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
        selector.selectedKeys().clear();
    }

    /** Starts the I/O thread. Called once, under c.mu, right after the session became current. */
    void start() {
        Thread t = new Thread(this::ioLoop, "lockbroker-io-" + number);
        t.setDaemon(true);
        t.start();
    }

    // ---- writing --------------------------------------------------------------

    /**
     * Writes one line: at once while nothing is queued, else after what is.
     * Never blocks. A write error kills the session, and its teardown fails
     * the calls the line carried.
     */
    void write(byte[] line) {
        synchronized (wmu) {
            if (killed) {
                return;
            }
            if (outStart == outEnd) {
                ByteBuffer bb = ByteBuffer.wrap(line);
                try {
                    ch.write(bb);
                } catch (IOException e) {
                    kill(e);
                    return;
                }
                lastSend = System.nanoTime();
                if (!bb.hasRemaining()) {
                    return;
                }
                queue(line, bb.position(), bb.remaining());
                key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                selector.wakeup();
                return;
            }
            queue(line, 0, line.length);
        }
    }

    private void queue(byte[] b, int off, int len) {
        if (out.length - outEnd < len) {
            int live = outEnd - outStart;
            if (out.length - live >= len && live < out.length / 2) {
                System.arraycopy(out, outStart, out, 0, live);
            } else {
                byte[] bigger = new byte[Math.max(out.length * 2, live + len + 4096)];
                System.arraycopy(out, outStart, bigger, 0, live);
                out = bigger;
            }
            outStart = 0;
            outEnd = live;
        }
        System.arraycopy(b, off, out, outEnd, len);
        outEnd += len;
    }

    /** (I/O thread) writes what is queued; stops asking for OP_WRITE once it is out. */
    private void flush() throws IOException {
        synchronized (wmu) {
            if (outStart == outEnd) {
                return;
            }
            ByteBuffer bb = ByteBuffer.wrap(out, outStart, outEnd - outStart);
            ch.write(bb);
            lastSend = System.nanoTime();
            outStart = bb.position();
            if (outStart == outEnd) {
                outStart = outEnd = 0;
                if (out.length > 1 << 20) {
                    out = new byte[0];
                }
                key.interestOps(SelectionKey.OP_READ);
            }
        }
    }

    // ---- the I/O thread -------------------------------------------------------

    /**
     * Ends the connection for a reason of the client's (cause, or null); the
     * I/O thread then tears the session down. Any thread, any time.
     */
    void kill(Throwable cause) {
        synchronized (wmu) {
            if (killed) {
                return;
            }
            killCause = cause;
            killed = true;
        }
        selector.wakeup();
    }

    /** Waits until the teardown is done (at most the given time). */
    boolean awaitEnd(long millis) {
        try {
            return ended.await(millis, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    private void ioLoop() {
        Throwable err = null;
        ByteBuffer rb = ByteBuffer.allocate(64 << 10);
        try {
            for (Object m : lines.takeUnread()) {
                c.route(this, m);
            }
            while (!killed) {
                int n;
                while ((n = ch.read(rb)) > 0) {
                    lastRecv = System.nanoTime();
                    if (pingAnswered()) {
                        c.pingAnswered(this);
                    }
                    List<Object> msgs = lines.feed(rb.array(), 0, n);
                    rb.clear();
                    for (Object m : msgs) {
                        c.route(this, m);
                    }
                    if (killed || n < rb.capacity()) {
                        break; // drained (a short read): the selector says when there is more
                    }
                }
                if (n < 0) {
                    break;
                }
                if (killed) {
                    break;
                }
                selector.select();
                selector.selectedKeys().clear();
                if (key.isValid() && (key.interestOps() & SelectionKey.OP_WRITE) != 0) {
                    flush();
                }
            }
        } catch (IOException | RuntimeException e) {
            err = e;
        } catch (Json.JsonException e) {
            err = new IOException("bad line from the broker: " + e.getMessage(), e);
        } catch (Error e) {
            err = e;
            throw e;
        } finally {
            synchronized (wmu) {
                killed = true;
                if (killCause != null) {
                    err = killCause;
                }
            }
            closeQuietly(ch, selector);
            try {
                c.sessionEnded(this, err);
            } finally {
                ended.countDown();
            }
        }
    }

    private boolean pingAnswered() {
        return pingInFlight; // LockBrokerClient.pingAnswered checks again under mu
    }

    // ---- line splitting -------------------------------------------------------

    /**
     * Splits the byte stream into decoded JSON values: complete lines only,
     * blank ones skipped, "\r\n" accepted; a line longer than MAX_INCOMING
     * or not JSON is an error after which the stream is unusable.
     */
    static final class LineReader {
        private byte[] part = new byte[0];
        private int partLen;
        private List<Object> unread = List.of();

        List<Object> feed(byte[] b, int off, int len) throws Json.JsonException {
            List<Object> msgs = null;
            int end = off + len;
            int start = off;
            for (int i = off; i < end; i++) {
                if (b[i] != '\n') {
                    continue;
                }
                Object m;
                if (partLen == 0) {
                    m = line(b, start, i);
                } else {
                    append(b, start, i - start);
                    m = line(part, 0, partLen);
                    partLen = 0;
                    if (part.length > 1 << 20) {
                        part = new byte[0];
                    }
                }
                if (m != BLANK) {
                    if (msgs == null) {
                        msgs = new java.util.ArrayList<>(2);
                    }
                    msgs.add(m);
                }
                start = i + 1;
            }
            if (start < end) {
                append(b, start, end - start);
            }
            return msgs == null ? List.of() : msgs;
        }

        private static final Object BLANK = new Object();

        private static Object line(byte[] b, int s, int e) throws Json.JsonException {
            if (e > s && b[e - 1] == '\r') {
                e--;
            }
            int i = s;
            while (i < e && (b[i] == ' ' || b[i] == '\t')) {
                i++;
            }
            if (i == e) {
                return BLANK;
            }
            return Json.parse(b, s, e - s);
        }

        private void append(byte[] b, int off, int len) throws Json.JsonException {
            if ((long) partLen + len > MAX_INCOMING) {
                throw new Json.JsonException("a line from the broker is longer than 64 MiB");
            }
            if (part.length - partLen < len) {
                byte[] bigger = new byte[(int) Math.min(Math.max((long) part.length * 2, (long) partLen + len),
                        MAX_INCOMING + 2L)];
                System.arraycopy(part, 0, bigger, 0, partLen);
                part = bigger;
            }
            System.arraycopy(b, off, part, partLen, len);
            partLen += len;
        }

        void unread(List<Object> msgs) {
            unread = List.copyOf(msgs.stream().filter(java.util.Objects::nonNull).toList());
        }

        List<Object> takeUnread() {
            List<Object> u = unread;
            unread = List.of();
            return u;
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
