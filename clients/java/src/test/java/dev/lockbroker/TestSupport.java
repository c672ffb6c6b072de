package dev.lockbroker;

// TestSupport - what the tests share: the environment that
// tests/clients/with-broker.sh exports (tests that need it are skipped
// without it), a tiny RESP client to reach Redis behind the broker's back,
// brokers of a test's own (LOCKBROKER_BIN, killed and restarted), a fake
// broker for answers a real one cannot be made to give, and a proxy that
// records every line a client writes.

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Function;

final class TestSupport {
    private TestSupport() {}

    static String env(String name) {
        String v = System.getenv(name);
        assumeTrue(v != null && !v.isEmpty(), name + " is not set (run under tests/clients/with-broker.sh)");
        return v;
    }

    /** LOCKBROKER_URL, or the test is skipped. */
    static String brokerUrl() {
        return env("LOCKBROKER_URL");
    }

    /** A lock name no other test (or run) uses. */
    static String unique(String what) {
        return "java-" + what + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static boolean waitUntil(BooleanSupplier cond, long millis) {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (System.nanoTime() < end) {
            if (cond.getAsBoolean()) {
                return true;
            }
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return cond.getAsBoolean();
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new AssertionError(e);
        }
    }

    /** PROTOCOL.md: -Dlockbroker.protocol, else protocol/PROTOCOL.md above the working directory. */
    static Path protocolDoc() {
        String p = System.getProperty("lockbroker.protocol");
        if (p != null) {
            return Path.of(p);
        }
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path f = d.resolve("protocol/PROTOCOL.md");
            if (Files.exists(f)) {
                return f;
            }
        }
        throw new AssertionError("protocol/PROTOCOL.md not found (set -Dlockbroker.protocol)");
    }

    /** The repository's top (above protocol/PROTOCOL.md). */
    static Path top() {
        return protocolDoc().toAbsolutePath().getParent().getParent();
    }

    // ---- Redis ----------------------------------------------------------------

    /** A minimal Redis client (RESP2 over one socket), enough for tests. */
    static final class Resp implements AutoCloseable {
        private final Socket sock;
        private final InputStream in;
        private final OutputStream out;

        Resp() {
            this(env("LOCKBROKER_REDIS_HOST"), Integer.parseInt(env("LOCKBROKER_REDIS_PORT")));
        }

        Resp(String host, int port) {
            try {
                sock = new Socket(host, port);
                sock.setSoTimeout(5000);
                in = new java.io.BufferedInputStream(sock.getInputStream());
                out = sock.getOutputStream();
            } catch (IOException e) {
                throw new AssertionError("redis: " + e, e);
            }
        }

        Object command(String... args) {
            StringBuilder sb = new StringBuilder("*" + args.length + "\r\n");
            for (String a : args) {
                byte[] b = a.getBytes(StandardCharsets.UTF_8);
                sb.append('$').append(b.length).append("\r\n").append(a).append("\r\n");
            }
            try {
                out.write(sb.toString().getBytes(StandardCharsets.UTF_8));
                out.flush();
                return reply();
            } catch (IOException e) {
                throw new AssertionError("redis: " + e, e);
            }
        }

        private String line() throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            int c;
            while ((c = in.read()) != '\n') {
                if (c < 0) {
                    throw new IOException("redis closed the connection");
                }
                b.write(c);
            }
            String s = b.toString(StandardCharsets.UTF_8);
            return s.endsWith("\r") ? s.substring(0, s.length() - 1) : s;
        }

        private Object reply() throws IOException {
            String l = line();
            String rest = l.substring(1);
            switch (l.charAt(0)) {
                case '+':
                    return rest;
                case '-':
                    throw new AssertionError("redis error: " + rest);
                case ':':
                    return Long.parseLong(rest);
                case '$': {
                    int n = Integer.parseInt(rest);
                    if (n < 0) {
                        return null;
                    }
                    byte[] b = in.readNBytes(n + 2);
                    return new String(b, 0, n, StandardCharsets.UTF_8);
                }
                case '*': {
                    int n = Integer.parseInt(rest);
                    if (n < 0) {
                        return null;
                    }
                    List<Object> a = new ArrayList<>();
                    for (int i = 0; i < n; i++) {
                        a.add(reply());
                    }
                    return a;
                }
                default:
                    throw new IOException("bad RESP line " + l);
            }
        }

        /** Deletes lock NAME's keys ("lb:{NAME}" and "lb:{NAME}:*"); returns how many. */
        long deleteLock(String name) {
            List<String> keys = new ArrayList<>();
            keys.add("DEL");
            keys.add("lb:{" + name + "}");
            for (Object k : (List<?>) command("KEYS", "lb:{" + name + "}:*")) {
                keys.add((String) k);
            }
            return (Long) command(keys.toArray(new String[0]));
        }

        @Override
        public void close() {
            try {
                sock.close();
            } catch (IOException e) {
                // nothing
            }
        }
    }

    // ---- brokers of a test's own ----------------------------------------------

    /** A lockbrokerd of the test's own on a free port, against the suite's Redis unless told otherwise. */
    static final class PrivateBroker implements AutoCloseable {
        final String bin = env("LOCKBROKER_BIN");
        final int port = freePort();
        final String url = "tcp://127.0.0.1:" + port;
        private final String redis;
        private final List<String> extra;
        private Process proc;

        PrivateBroker(String... extra) {
            this.redis = "redis://" + env("LOCKBROKER_REDIS_HOST") + ":" + env("LOCKBROKER_REDIS_PORT");
            this.extra = List.of(extra);
        }

        private PrivateBroker(String redis, List<String> extra) {
            this.redis = redis;
            this.extra = extra;
        }

        /** A broker whose Redis is the one given (one that is down, for the tests that want it so). */
        static PrivateBroker withRedis(String redis, String... extra) {
            return new PrivateBroker(redis, List.of(extra));
        }

        /** Starts it; returns once it grants a lock (with Redis up), or answers (redisUp false). */
        PrivateBroker start(boolean redisUp) {
            List<String> cmd = new ArrayList<>(List.of(bin, "--redis", redis, "--listen", url, "--log-level", "warn"));
            cmd.addAll(extra);
            ProcessBuilder pb = new ProcessBuilder(cmd);
            String tmp = System.getenv("LOCKBROKER_TMP");
            File log = new File(tmp != null ? tmp : System.getProperty("java.io.tmpdir"), "java-broker-" + port + ".log");
            pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);
            pb.redirectError(ProcessBuilder.Redirect.appendTo(log));
            try {
                proc = pb.start();
            } catch (IOException e) {
                throw new AssertionError("start broker: " + e, e);
            }
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (System.nanoTime() < end && proc.isAlive()) {
                String line = probe();
                if (line != null && (!redisUp || line.contains("\"lease\""))) {
                    return this;
                }
                sleep(20);
            }
            throw new AssertionError("private lockbrokerd did not start (see " + log + ")");
        }

        PrivateBroker start() {
            return start(true);
        }

        private String probe() {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 300);
                s.setSoTimeout(1000);
                s.getOutputStream().write("{\"id\":1,\"op\":\"acquire\",\"lock\":\"java-test-ready\",\"wait_ms\":0}\n"
                        .getBytes(StandardCharsets.UTF_8));
                return new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8)).readLine();
            } catch (IOException e) {
                return null;
            }
        }

        long pid() {
            return proc.pid();
        }

        /** SIGKILL, as a crash would; waits for the process to end. */
        void kill() {
            if (proc != null && proc.isAlive()) {
                proc.destroyForcibly();
                try {
                    proc.waitFor(5, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }

        /** Sends a signal by name (STOP, CONT, TERM). */
        void signal(String sig) {
            try {
                new ProcessBuilder("kill", "-" + sig, Long.toString(proc.pid()))
                        .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                        .redirectError(ProcessBuilder.Redirect.DISCARD).start().waitFor();
            } catch (IOException | InterruptedException e) {
                throw new AssertionError(e);
            }
        }

        @Override
        public void close() {
            if (proc != null && proc.isAlive()) {
                signal("CONT");
                stop(proc);
            }
        }
    }

    /**
     * A redis-server of the test's own on a free port (no persistence), for
     * brokers that must share a Redis nobody else uses; close() stops it.
     */
    static final class PrivateRedis implements AutoCloseable {
        final int port = freePort();
        final String url = "redis://127.0.0.1:" + port;
        private final Process proc;

        PrivateRedis() {
            env("LOCKBROKER_BIN"); // skipped where the suite's brokers are not ours to add to
            String tmp = System.getenv("LOCKBROKER_TMP");
            File dir = new File(tmp != null ? tmp : System.getProperty("java.io.tmpdir"));
            ProcessBuilder pb = new ProcessBuilder("redis-server", "--port", Integer.toString(port),
                    "--bind", "127.0.0.1", "--dir", dir.getPath(), "--save", "", "--appendonly", "no",
                    "--daemonize", "no");
            pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(dir, "java-redis-" + port + ".log")));
            pb.redirectErrorStream(true);
            try {
                proc = pb.start();
            } catch (IOException e) {
                throw new AssertionError("start redis-server: " + e, e);
            }
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (System.nanoTime() < end && proc.isAlive()) {
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress("127.0.0.1", port), 300);
                    try (Resp r = new Resp("127.0.0.1", port)) {
                        if ("PONG".equals(r.command("PING"))) {
                            return;
                        }
                    }
                } catch (IOException | AssertionError e) {
                    // not yet
                }
                sleep(20);
            }
            close();
            throw new AssertionError("private redis-server did not start on port " + port);
        }

        @Override
        public void close() {
            stop(proc);
        }
    }

    /** Stops proc: TERM, then KILL after 5 s. */
    static void stop(Process proc) {
        if (!proc.isAlive()) {
            return;
        }
        proc.destroy();
        try {
            if (!proc.waitFor(5, TimeUnit.SECONDS)) {
                proc.destroyForcibly();
                proc.waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ---- servers of the tests' own, in this process -----------------------------

    /**
     * A listening loopback socket and its acceptor thread; serve(n, socket)
     * handles accepted connection number n (1, 2, ...) on a thread of its
     * own. accepts holds each accept's System.nanoTime(). close() stops
     * everything and closes every socket it made.
     */
    abstract static class Server implements AutoCloseable {
        final ServerSocket listener;
        final int port;
        final String url;
        final List<Long> accepts = new CopyOnWriteArrayList<>();
        private final List<Socket> socks = new CopyOnWriteArrayList<>();
        private volatile boolean stopping;

        Server() {
            try {
                listener = new ServerSocket(0, 64, java.net.InetAddress.getLoopbackAddress());
            } catch (IOException e) {
                throw new AssertionError(e);
            }
            port = listener.getLocalPort();
            url = "tcp://127.0.0.1:" + port;
            Thread t = new Thread(this::acceptLoop, getClass().getSimpleName() + "-accept");
            t.setDaemon(true);
            t.start();
        }

        private void acceptLoop() {
            while (!stopping) {
                Socket s;
                try {
                    s = listener.accept();
                } catch (IOException e) {
                    return;
                }
                accepts.add(System.nanoTime());
                int n = accepts.size();
                if (stopping) {
                    closeQuietly(s);
                    return;
                }
                accepted(n, s);
            }
        }

        void accepted(int n, Socket s) {
            track(s);
            Thread t = new Thread(() -> serve(n, s), getClass().getSimpleName() + "-conn-" + n);
            t.setDaemon(true);
            t.start();
        }

        void track(Socket s) {
            socks.add(s);
        }

        abstract void serve(int n, Socket s);

        static void closeQuietly(Socket s) {
            try {
                s.close();
            } catch (IOException e) {
                // nothing
            }
        }

        /** Closes every connection made so far (the listener stays). */
        void dropAll() {
            for (Socket s : socks) {
                closeQuietly(s);
            }
        }

        @Override
        public void close() {
            stopping = true;
            try {
                listener.close();
            } catch (IOException e) {
                // nothing
            }
            dropAll();
        }
    }

    /** A request line received by a fake broker on connection number conn. */
    static final class Received {
        final int conn;
        final Map<String, Object> msg;
        final String line;

        Received(int conn, Map<String, Object> msg, String line) {
            this.conn = conn;
            this.msg = msg;
            this.line = line;
        }
    }

    /** What a fake broker's answer function returns: lines to write; CLOSE closes the connection after them. */
    static final String CLOSE = "\u0000close";

    static final Map<String, Object> HELLO_LIMITS;

    static {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("max_line", 65536L);
        m.put("ttl_ms_min", 100L);
        m.put("ttl_ms_max", 86400000L);
        m.put("max_leases_per_session", 10000L);
        m.put("max_waiters_per_session", 1000L);
        m.put("max_inflight", 1024L);
        m.put("keepalive_ms_min", 500L);
        m.put("keepalive_ms_max", 600000L);
        HELLO_LIMITS = m;
    }

    /**
     * A pretend lockbrokerd: hello is answered as a real broker does
     * (session "sN" for connection N), every other request with what
     * answer returns (a list of lines; CLOSE closes the connection; null
     * closes it at once). With slam, every connection is closed as soon as
     * it is accepted.
     */
    static final class FakeBroker extends Server {
        static final String SERVER = "lockbroker/0.0.0-fake";
        final List<Received> received = new CopyOnWriteArrayList<>();
        final Map<String, Object> limits = new java.util.concurrent.ConcurrentHashMap<>(HELLO_LIMITS);
        private final Function<Map<String, Object>, List<String>> answer;
        private final boolean slam;
        volatile String helloError; // a code: hello is answered with it

        FakeBroker(Function<Map<String, Object>, List<String>> answer) {
            this(answer, false);
        }

        FakeBroker(Function<Map<String, Object>, List<String>> answer, boolean slam) {
            this.answer = answer;
            this.slam = slam;
        }

        @Override
        void accepted(int n, Socket s) {
            if (slam) {
                closeQuietly(s);
                return;
            }
            super.accepted(n, s);
        }

        @Override
        void serve(int n, Socket s) {
            try (s) {
                BufferedReader r = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                OutputStream out = s.getOutputStream();
                String line;
                while ((line = r.readLine()) != null) {
                    if (line.isBlank()) {
                        continue;
                    }
                    @SuppressWarnings("unchecked")
                    Map<String, Object> msg = (Map<String, Object>) Json.parse(line.getBytes(StandardCharsets.UTF_8));
                    received.add(new Received(n, msg, line));
                    List<String> lines;
                    if ("hello".equals(msg.get("op"))) {
                        if (helloError != null) {
                            lines = List.of(errorLine(msg.get("id"), helloError, "the fake's " + helloError));
                        } else {
                            Map<String, Object> h = new LinkedHashMap<>();
                            h.put("id", msg.get("id"));
                            h.put("ok", true);
                            h.put("server", SERVER);
                            h.put("proto", 1L);
                            h.put("session", "s" + n);
                            h.put("broker", "fa4eb40c3e5f0001");
                            h.put("limits", new LinkedHashMap<>(limits));
                            lines = List.of(Json.write(h));
                        }
                    } else {
                        lines = answer.apply(msg);
                    }
                    if (lines == null) {
                        return;
                    }
                    StringBuilder sb = new StringBuilder();
                    boolean close = false;
                    for (String l : lines) {
                        if (CLOSE.equals(l)) {
                            close = true;
                            break;
                        }
                        sb.append(l).append('\n');
                    }
                    out.write(sb.toString().getBytes(StandardCharsets.UTF_8));
                    out.flush();
                    if (close) {
                        return;
                    }
                }
            } catch (IOException | Json.JsonException e) {
                // the connection ends
            }
        }

        /** The ops received (on connection conn only, if > 0), in order. */
        List<Object> ops(int conn) {
            List<Object> out = new ArrayList<>();
            for (Received r : received) {
                if (conn <= 0 || r.conn == conn) {
                    out.add(r.msg.get("op"));
                }
            }
            return out;
        }
    }

    static String errorLine(Object id, String code, String message) {
        Map<String, Object> e = new LinkedHashMap<>();
        e.put("code", code);
        e.put("message", message);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", id);
        m.put("ok", false);
        m.put("error", e);
        return Json.write(m);
    }

    static String okLine(Object id, Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", id);
        m.put("ok", true);
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return Json.write(m);
    }

    /**
     * A TCP proxy in front of 127.0.0.1:upstream that records every line a
     * client writes through it (connection number, line), before passing it
     * on: once the client has the answer to a request, every line it wrote
     * before it on that connection is recorded.
     */
    static final class LoggingProxy extends Server {
        final int upstream;
        final List<Received> lines = new CopyOnWriteArrayList<>();

        LoggingProxy(int upstream) {
            this.upstream = upstream;
        }

        @Override
        void serve(int n, Socket client) {
            Socket up;
            try {
                up = new Socket("127.0.0.1", upstream);
            } catch (IOException e) {
                closeQuietly(client);
                return;
            }
            track(up);
            Thread back = new Thread(() -> pump(up, client, 0), "proxy-back-" + n);
            back.setDaemon(true);
            back.start();
            pump(client, up, n);
        }

        private void pump(Socket src, Socket dst, int n) {
            byte[] buf = new byte[65536];
            ByteArrayOutputStream partial = new ByteArrayOutputStream();
            try {
                InputStream in = src.getInputStream();
                OutputStream out = dst.getOutputStream();
                int k;
                while ((k = in.read(buf)) > 0) {
                    if (n > 0) {
                        for (int i = 0; i < k; i++) {
                            if (buf[i] == '\n') {
                                lines.add(new Received(n, null, partial.toString(StandardCharsets.UTF_8)));
                                partial.reset();
                            } else {
                                partial.write(buf[i]);
                            }
                        }
                    }
                    out.write(buf, 0, k);
                    out.flush();
                }
            } catch (SocketTimeoutException e) {
                // ends
            } catch (IOException e) {
                // ends
            } finally {
                closeQuietly(src);
                closeQuietly(dst);
            }
        }

        /** The recorded lines holding what, on connections >= minConn. */
        List<String> written(String what, int minConn) {
            List<String> out = new ArrayList<>();
            for (Received r : lines) {
                if (r.conn >= minConn && r.line.contains(what)) {
                    out.add(r.line);
                }
            }
            return out;
        }
    }
}
