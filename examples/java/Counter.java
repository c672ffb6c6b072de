// Counter.java: a counter in Redis, incremented under lock "counter", with
// fencing checked on every write.
//
// Each of --iterations rounds takes lock "counter", reads "counter:value"
// and "fence:last", sleeps a little (so that a missing lock would lose
// updates), and writes value + 1 together with the lease's fence. A fence
// not greater than the last one stored is a fencing violation: some
// earlier holder wrote with a newer lease, so this one is stale. Run
// several copies at once: the counter then grows by exactly the sum of
// their iterations.
//
//     sh clients/java/build.sh jar
//     java -cp build/java/lockbroker-0.1.0.jar examples/java/Counter.java --iterations 50
//
// Options: --url (default $LOCKBROKER_URL, as lockctl), --redis HOST:PORT
// (default $LOCKBROKER_REDIS_HOST:$LOCKBROKER_REDIS_PORT, else
// 127.0.0.1:6379). Exit status: 0 success, 1 fence violation, 2 any other
// failure (broker error, lost lease, Redis error, usage).

import dev.lockbroker.ClientOptions;
import dev.lockbroker.Lease;
import dev.lockbroker.LockBrokerClient;
import dev.lockbroker.LockOptions;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

public final class Counter {
    /** Just enough RESP2 to GET and SET a few keys. */
    static final class Redis implements AutoCloseable {
        private final Socket sock;
        private final InputStream in;
        private final OutputStream out;

        Redis(String host, int port) throws IOException {
            sock = new Socket(host, port);
            sock.setSoTimeout(10000);
            in = new BufferedInputStream(sock.getInputStream());
            out = sock.getOutputStream();
        }

        Object command(String... args) throws IOException {
            StringBuilder sb = new StringBuilder("*").append(args.length).append("\r\n");
            for (String a : args) {
                sb.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(a).append("\r\n");
            }
            out.write(sb.toString().getBytes(StandardCharsets.UTF_8));
            out.flush();
            return reply();
        }

        private String line() throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            for (int c; (c = in.read()) != '\n';) {
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
                case ':':
                    return Long.parseLong(rest);
                case '$': {
                    int n = Integer.parseInt(rest);
                    return n < 0 ? null : new String(in.readNBytes(n + 2), 0, n, StandardCharsets.UTF_8);
                }
                case '*': {
                    int n = Integer.parseInt(rest);
                    List<Object> a = new ArrayList<>();
                    for (int i = 0; i < n; i++) {
                        a.add(reply());
                    }
                    return a;
                }
                default:
                    throw new IOException("redis: " + l);
            }
        }

        @Override
        public void close() throws IOException {
            sock.close();
        }
    }

    /** A fence not above the last one stored. */
    static final class FenceViolation extends Exception {
        private static final long serialVersionUID = 1L;

        FenceViolation(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        int iterations = 10;
        String url = null;
        String redis = env("LOCKBROKER_REDIS_HOST", "127.0.0.1") + ":" + env("LOCKBROKER_REDIS_PORT", "6379");
        try {
            for (int i = 0; i < args.length; i++) {
                switch (args[i]) {
                    case "--iterations":
                        iterations = Integer.parseInt(args[++i]);
                        break;
                    case "--url":
                        url = args[++i];
                        break;
                    case "--redis":
                        redis = args[++i];
                        break;
                    default:
                        throw new IllegalArgumentException("unknown argument " + args[i]);
                }
            }
        } catch (RuntimeException e) {
            System.err.println("Counter.java: usage: [--iterations N] [--url URL] [--redis HOST:PORT]: " + e.getMessage());
            System.exit(2);
        }
        int colon = redis.lastIndexOf(':');
        try (Redis r = new Redis(redis.substring(0, colon), Integer.parseInt(redis.substring(colon + 1)));
             LockBrokerClient client = LockBrokerClient.connect(url, ClientOptions.defaults().clientName("Counter.java"))) {
            for (int i = 0; i < iterations; i++) {
                try (Lease lease = client.lock("counter", LockOptions.defaults().ttl(Duration.ofSeconds(10)))) {
                    List<?> got = (List<?>) r.command("MGET", "counter:value", "fence:last");
                    long fence = lease.fence();
                    if (got.get(1) != null && fence <= Long.parseLong((String) got.get(1))) {
                        throw new FenceViolation("fence violation: " + fence + " after " + got.get(1));
                    }
                    long value = got.get(0) == null ? 0 : Long.parseLong((String) got.get(0));
                    Thread.sleep(ThreadLocalRandom.current().nextInt(1, 6));
                    lease.check(); // never write under a lease that was lost meanwhile
                    r.command("MSET", "counter:value", Long.toString(value + 1), "fence:last", Long.toString(fence));
                } // released here; LeaseLostException if it was lost
            }
            System.out.println("Counter.java: " + iterations + " increments, counter:value is "
                    + r.command("GET", "counter:value"));
        } catch (FenceViolation e) {
            System.err.println("Counter.java: " + e.getMessage());
            System.exit(1);
        } catch (IOException | RuntimeException e) { // LockBrokerException included
            System.err.println("Counter.java: " + e);
            System.exit(2);
        } catch (InterruptedException e) {
            System.err.println("Counter.java: interrupted");
            System.exit(2);
        }
    }

    private static String env(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : v;
    }
}
