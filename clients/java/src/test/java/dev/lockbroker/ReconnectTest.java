package dev.lockbroker;

// ReconnectTest - what happens after a connection drops, against listeners
// of the test's own (no broker needed): the backoff between failed connects
// (how many connects a client makes in a given time), the reconnect at once
// after a drop, and that a lease of the dropped session never has its
// token sent again while a detached one is used through the new session.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockbroker.TestSupport.FakeBroker;
import dev.lockbroker.TestSupport.Received;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class ReconnectTest {
    /**
     * Serves its first connection as a broker until drop(), and accepts every
     * later one only to close it at once: each is a failed connect.
     */
    static final class SlamListener extends TestSupport.Server {
        volatile Socket first;
        volatile boolean dropped;
        final List<Long> later = new CopyOnWriteArrayList<>();
        private final FakeBroker fake;

        SlamListener() {
            fake = new FakeBroker(msg -> List.of(TestSupport.okLine(msg.get("id"), "redis", "up")));
        }

        @Override
        void accepted(int n, Socket s) {
            if (first == null && !dropped) {
                first = s;
                track(s);
                Thread t = new Thread(() -> fake.serve(1, s), "slam-first");
                t.setDaemon(true);
                t.start();
                return;
            }
            later.add(System.nanoTime());
            closeQuietly(s);
        }

        @Override
        void serve(int n, Socket s) {}

        void drop() {
            dropped = true;
            if (first != null) {
                closeQuietly(first);
            }
        }

        @Override
        public void close() {
            super.close();
            fake.close();
        }
    }

    /**
     * The most connects a client can start within elapsed of its first one
     * when each fails: each is followed by at least 80% of the documented
     * delay (lo, doubling, capped at hi).
     */
    static int maxConnects(long lo, long hi, long elapsed) {
        int n = 1;
        long sum = 0;
        long d = lo;
        for (;;) {
            sum += (long) (d * 0.79);
            if (sum > elapsed) {
                return n;
            }
            n++;
            d = Math.min(d * 2, hi);
        }
    }

    /**
     * After its session drops, a client whose every connect fails, asked for
     * requests in a tight loop, makes no more connects than the backoff
     * allows and still makes them.
     */
    @Test
    void reconnectBackoff() {
        long[][] cases = {
            // lo, hi, window (ms), at least: nominal connects at about 0, 50,
            // 150, 350, 750 ms: 5 in 1.5 s, 1 if the first delay were 2 s
            {50, 2000, 1500, 3},
            // 30, 60, 60, ...: about 40 in 3 s, 7 without the cap
            {30, 60, 3000, 12},
        };
        for (long[] c : cases) {
            try (SlamListener s = new SlamListener()) {
                // (a short connect timeout: each call gives up soon, so the loop asks often)
                ClientOptions o = ClientOptions.defaults().livenessCheck(false).connectTimeout(Duration.ofMillis(100))
                        .backoff(Duration.ofMillis(c[0]), Duration.ofMillis(c[1]));
                LockBrokerClient client = LockBrokerClient.connect(s.url, o);
                assertEquals("up", client.ping());
                long start = System.nanoTime();
                s.drop();
                long deadline = start + TimeUnit.MILLISECONDS.toNanos(c[2]);
                int requests = 0;
                while (System.nanoTime() < deadline) {
                    requests++;
                    assertThrows(DisconnectedException.class, client::ping);
                }
                client.close();
                long elapsed = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                int connects = s.later.size();
                int most = maxConnects(c[0], c[1], elapsed);
                assertTrue(connects <= most, connects + " connects in " + elapsed + " ms: backoff " + c[0] + ".."
                        + c[1] + " allows at most " + most + " (" + requests + " requests)");
                assertTrue(connects >= c[3], connects + " connects in " + elapsed + " ms, want at least " + c[3]);
            }
        }
    }

    /**
     * With a backoff whose shortest delay is 16 s, a request after a drop
     * still connects at once, drop after drop (the backoff is for failed
     * connects only); once a connect has failed, the next one waits.
     */
    @Test
    void reconnectAfterDropIsImmediate() {
        FakeBroker f = new FakeBroker(msg -> "drop".equals(msg.get("op")) ? List.of(TestSupport.CLOSE)
                : List.of(TestSupport.okLine(msg.get("id"), "redis", "up")));
        try (f; LockBrokerClient c = LockBrokerClient.connect(f.url,
                ClientOptions.defaults().backoff(Duration.ofSeconds(20), Duration.ofSeconds(20)))) {
            for (int i = 1; i <= 3; i++) {
                assertThrows(DisconnectedException.class, () -> c.request("drop", null));
                long t0 = System.nanoTime();
                assertEquals("up", c.ping());
                assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 5000);
                assertEquals(i + 1, f.accepts.size());
            }
            // The control: nothing listens any more. The connect after the drop
            // is made at once and fails; the next one waits for the backoff.
            f.listener.close();
            assertThrows(DisconnectedException.class, () -> c.request("drop", null));
            assertThrows(DisconnectedException.class, c::ping);
            AtomicReference<Throwable> got = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    c.ping();
                } catch (Throwable e) {
                    got.set(e);
                }
            });
            t.start();
            t.join(1000);
            assertTrue(t.isAlive(), "the request right after a failed connect did not wait for the backoff");
            t.interrupt();
            t.join(3000);
            assertTrue(got.get() instanceof CancelledException, String.valueOf(got.get()));
        } catch (java.io.IOException | InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * A session drops while it holds a lease, one more inside withLock and a
     * detached one; the client connects again. The broker (a fake, which
     * keeps every line and would answer any release or extend with success)
     * never receives the old leases' tokens: release, extend and leaving the
     * scope report the loss without a round trip. The detached lease, not
     * bound to the session, is extended and released through the new one.
     */
    @Test
    void oldTokenNeverSent() throws Exception {
        AtomicInteger seq = new AtomicInteger();
        FakeBroker f = new FakeBroker(msg -> {
            Object id = msg.get("id");
            switch (String.valueOf(msg.get("op"))) {
                case "acquire":
                    int n = seq.incrementAndGet();
                    return List.of(TestSupport.okLine(id, "lease", String.format("%032x", 0xfeed0000L + n), "lock",
                            msg.get("lock"), "mode", "exclusive", "fence", (long) n, "ttl_ms", 30000L, "count", 1L));
                case "release":
                    return List.of(TestSupport.okLine(id, "count", 0L));
                case "extend":
                    return List.of(TestSupport.okLine(id, "ttl_ms", msg.get("ttl_ms")));
                case "drop":
                    return List.of(TestSupport.CLOSE);
                default:
                    return List.of(TestSupport.okLine(id, "redis", "up"));
            }
        });
        try (f; LockBrokerClient c = LockBrokerClient.connect(f.url,
                ClientOptions.defaults().backoff(Duration.ofMillis(20), Duration.ofMillis(200)))) {
            List<Lease> lostSeen = new CopyOnWriteArrayList<>();
            Lease held = c.lock("held", LockOptions.defaults().onLost(lostSeen::add));
            Lease quiet = c.lock("quiet");
            Lease detached = c.lock("detached", LockOptions.defaults().detach());
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch reconnected = new CountDownLatch(1);
            AtomicReference<Lease> inner = new AtomicReference<>();
            AtomicReference<Throwable> withLock = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    c.withLock("withlock", LockOptions.defaults(), l -> {
                        inner.set(l);
                        inside.countDown();
                        try {
                            reconnected.await();
                        } catch (InterruptedException e) {
                            throw new AssertionError(e);
                        }
                        return null;
                    });
                } catch (Throwable e) {
                    withLock.set(e);
                }
            });
            t.start();
            assertTrue(inside.await(5, TimeUnit.SECONDS));

            assertThrows(DisconnectedException.class, () -> c.request("drop", null));
            // Documented order: the session's leases are lost before its pending requests fail.
            assertTrue(held.isLost() && inner.get().isLost());
            assertEquals("disconnected", held.lostReason());
            assertFalse(detached.isLost());
            assertEquals("up", c.ping());
            assertEquals(2, f.accepts.size());

            for (Lease l : List.of(held, inner.get())) {
                LeaseLostException e = assertThrows(LeaseLostException.class, l::release);
                assertEquals("disconnected", e.reason());
                e = assertThrows(LeaseLostException.class, () -> l.extend(Duration.ofSeconds(5)));
                assertEquals("disconnected", e.reason());
            }
            reconnected.countDown();
            t.join(5000);
            assertTrue(withLock.get() instanceof LeaseLostException, String.valueOf(withLock.get()));
            assertEquals("disconnected", ((LeaseLostException) withLock.get()).reason());
            assertEquals(Duration.ofSeconds(5), detached.extend(Duration.ofSeconds(5)));
            assertEquals(0, detached.release());
            assertEquals("up", c.ping()); // every line before it is received
            assertTrue(TestSupport.waitUntil(() -> lostSeen.size() == 1, 3000));
            assertSame(held, lostSeen.get(0));

            int detachedSent = 0;
            List<String> leaks = new ArrayList<>();
            for (Received r : f.received) {
                for (Lease l : List.of(held, inner.get(), quiet)) {
                    if (r.line.contains(l.token())) {
                        leaks.add("conn " + r.conn + ": " + r.line);
                    }
                }
                if (r.line.contains(detached.token())) {
                    assertEquals(2, r.conn, r.line);
                    detachedSent++;
                }
            }
            assertEquals(List.of(), leaks, "tokens of leases lost with their session reached the broker");
            assertEquals(2, detachedSent, "the detached lease's extend and release on the new session");
            // Leaving the scope of a lost lease says so (once: a handle that
            // already threw the loss, as held did, adds nothing).
            LeaseLostException e = assertThrows(LeaseLostException.class, () -> {
                try (Lease l = quiet) {
                    assertTrue(l.isLost());
                }
            });
            assertEquals("disconnected", e.reason());
            assertSame(quiet, e.lease());
            held.close();
            Map<String, Object> info = c.serverInfo();
            assertEquals("s2", info.get("session"));
        }
    }
}
