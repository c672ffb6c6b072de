package dev.lockbroker;

// LockTest - the client against the suite's broker (LOCKBROKER_URL): hello
// and auth, scoped locks, waiting, tryLock, reentrancy per thread, cancel by
// interrupt and by future, shared mode, semaphores, threads sharing a
// client (two on one lock, sixteen on locks of their own), detached leases,
// the asynchronous API, and every error code the broker can be made to
// answer on demand.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class LockTest {
    static LockBrokerClient client;
    static LockBrokerClient other;

    @BeforeAll
    static void connect() {
        String url = TestSupport.brokerUrl();
        client = LockBrokerClient.connect(url, ClientOptions.defaults().clientName("java-tests"));
        other = LockBrokerClient.connect(url, ClientOptions.defaults().clientName("java-tests-other"));
    }

    @AfterAll
    static void close() {
        if (client != null) {
            client.close();
            other.close();
        }
    }

    static LockOptions noWait() {
        return LockOptions.defaults().waitTime(Duration.ZERO);
    }

    @Test
    void helloAndPing() {
        Map<String, Object> info = client.serverInfo();
        assertEquals(1L, info.get("proto"));
        assertTrue(String.valueOf(info.get("server")).startsWith("lockbroker/"));
        assertTrue(((Map<?, ?>) info.get("limits")).containsKey("max_line"));
        assertEquals("up", client.ping());
        Map<String, Object> stats = client.stats();
        for (String k : List.of("uptime_s", "sessions", "leases", "acquired_total", "redis")) {
            assertTrue(stats.containsKey(k), k);
        }
        assertEquals(System.getenv("LOCKBROKER_URL"), client.url());
    }

    @Test
    void defaultUrlIsLockbrokerUrl() {
        TestSupport.brokerUrl();
        try (LockBrokerClient c = LockBrokerClient.connect()) {
            assertEquals(System.getenv("LOCKBROKER_URL"), c.url());
            assertEquals("up", c.ping());
            assertTrue(c.clientName().endsWith("lockbroker-java/" + LockBrokerClient.VERSION));
        }
    }

    @Test
    void scopedLockAndRelease() {
        String name = TestSupport.unique("scoped");
        Lease kept;
        try (Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofSeconds(5)).waitTime(Duration.ZERO))) {
            kept = lease;
            assertEquals(name, lease.name());
            assertEquals("exclusive", lease.mode());
            assertEquals(1, lease.count());
            assertEquals(Duration.ofSeconds(5), lease.ttl());
            assertTrue(lease.isHeld());
            LockInfo info = client.inspect(name);
            assertEquals("exclusive", info.state());
            assertEquals(lease.fence(), info.fence());
            assertEquals(LockBrokerClient.currentOwner(), info.holders().get(0).owner());
            assertEquals("java-tests", info.holders().get(0).client());
            assertTrue(client.leases().stream().anyMatch(l -> l.token().equals(lease.token())));
            assertFalse(lease.toString().contains(lease.token()));
        }
        assertTrue(kept.isReleased());
        assertFalse(kept.isLost());
        assertEquals("free", client.inspect(name).state());
        assertThrows(NotHeldException.class, kept::release);
        kept.close(); // a second close is nothing
    }

    @Test
    void fencesIncrease() {
        String name = TestSupport.unique("fence");
        long last = 0;
        for (int i = 0; i < 3; i++) {
            try (Lease l = client.lock(name, noWait())) {
                assertTrue(l.fence() > last);
                last = l.fence();
            }
        }
    }

    /** The calling thread is the owner: the same thread re-enters, another thread waits. */
    @Test
    void reentrantPerThread() throws Exception {
        String name = TestSupport.unique("reenter");
        try (Lease outer = client.lock(name)) {
            try (Lease inner = client.lock(name, noWait())) {
                assertEquals(outer.token(), inner.token());
                assertEquals(2, inner.count());
                assertEquals(2, client.inspect(name).holders().get(0).count());
                // another thread of the same client: a holder of its own, so it waits
                AtomicReference<Object> got = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        got.set(client.tryLock(name, Duration.ofMillis(200)));
                    } catch (RuntimeException e) {
                        got.set(e);
                    }
                });
                t.start();
                t.join(5000);
                assertFalse(t.isAlive());
                assertTrue(got.get() == null, "another thread re-entered: " + got.get());
            }
            assertTrue(outer.isHeld());
            assertEquals(1, client.inspect(name).holders().get(0).count());
            // now the other thread waits until this one is done
            AtomicReference<Lease> waited = new AtomicReference<>();
            Thread t = new Thread(() -> waited.set(client.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(5)))));
            t.start();
            assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 1, 3000));
            outer.close();
            t.join(5000);
            assertNotNull(waited.get());
            assertNotEquals(outer.token(), waited.get().token());
            assertTrue(waited.get().fence() > outer.fence());
            waited.get().release();
        }
        assertEquals("free", client.inspect(name).state());
    }

    @Test
    void releaseAndExtend() {
        String name = TestSupport.unique("extend");
        Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofSeconds(2)).waitTime(Duration.ZERO));
        assertEquals(Duration.ofSeconds(5), lease.extend(Duration.ofSeconds(5)));
        assertEquals(Duration.ofSeconds(5), lease.ttl());
        assertTrue(client.inspect(name).holders().get(0).ttl().toMillis() > 3000);
        assertEquals(0, lease.release());
        assertThrows(NotHeldException.class, () -> lease.extend(Duration.ofSeconds(1)));
    }

    @Test
    void waitTimesOut() {
        String name = TestSupport.unique("timeout");
        try (Lease held = other.lock(name)) {
            long t0 = System.nanoTime();
            LockTimeoutException e = assertThrows(LockTimeoutException.class,
                    () -> client.lock(name, LockOptions.defaults().waitTime(Duration.ofMillis(200))));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(190));
            assertEquals("timeout", e.code());
            assertEquals("acquire", e.op());
            assertEquals(name, e.lock());
            assertFalse(e.brokerMessage().isEmpty());
            assertNull(client.tryLock(name));
            t0 = System.nanoTime();
            assertNull(client.tryLock(name, Duration.ofMillis(150)));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(140));
            assertTrue(held.isHeld());
        }
        try (Lease l = client.tryLock(name)) {
            assertNotNull(l);
        }
    }

    @Test
    void waitIsGrantedOnRelease() throws Exception {
        String name = TestSupport.unique("handoff");
        Lease held = other.lock(name);
        AtomicReference<Lease> got = new AtomicReference<>();
        Thread t = new Thread(() -> got.set(client.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(5)))));
        t.start();
        assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 1, 3000));
        held.release();
        t.join(5000);
        assertTrue(got.get().fence() > held.fence());
        got.get().release();
    }

    @Test
    void interruptCancelsAWaitingAcquire() throws Exception {
        String name = TestSupport.unique("interrupt");
        try (Lease held = other.lock(name)) {
            AtomicReference<Throwable> err = new AtomicReference<>();
            AtomicReference<Boolean> flag = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    client.lock(name);
                } catch (Throwable e) {
                    err.set(e);
                    flag.set(Thread.currentThread().isInterrupted());
                }
            });
            t.start();
            assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 1, 3000));
            t.interrupt();
            t.join(5000);
            assertTrue(err.get() instanceof CancelledException, String.valueOf(err.get()));
            assertEquals(Boolean.TRUE, flag.get());
            assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 0, 3000));
        }
        // Nothing of ours holds it: the cancelled acquire left no lease.
        assertTrue(TestSupport.waitUntil(() -> client.inspect(name).state().equals("free"), 3000));
        assertTrue(client.leases().stream().noneMatch(l -> l.lock().equals(name)));
    }

    @Test
    void sharedMode() {
        String name = TestSupport.unique("shared");
        try (Lease a = client.lock(name, noWait().shared()); Lease b = other.lock(name, noWait().shared())) {
            assertEquals("shared", a.mode());
            assertEquals("shared", b.mode());
            LockInfo info = client.inspect(name);
            assertEquals("shared", info.state());
            assertEquals(2, info.holders().size());
            assertThrows(LockTimeoutException.class, () -> other.lock(name, noWait().owner("writer")));
        }
        try (Lease w = client.lock(name, noWait())) {
            assertEquals("exclusive", w.mode());
        }
    }

    @Test
    void semaphore() {
        String name = TestSupport.unique("sem");
        Lease p1 = client.lock(name, noWait().limit(2));
        Lease p2 = client.lock(name, noWait().limit(2));
        assertEquals("permit", p1.mode());
        assertEquals("permit", p2.mode());
        assertNotEquals(p1.token(), p2.token());
        assertTrue(p1.fence() < p2.fence());
        LockInfo info = client.inspect(name);
        assertEquals("semaphore", info.state());
        assertEquals(2, info.limit());
        assertEquals(2, info.holders().size());
        assertThrows(LockTimeoutException.class, () -> other.lock(name, noWait().limit(2)));
        p1.release();
        try (Lease p3 = other.lock(name, noWait().limit(2))) {
            assertEquals("permit", p3.mode());
        }
        p2.release();
    }

    /** Two threads sharing one client on one lock exclude each other as two processes would. */
    @Test
    void threadsSharingAClientExcludeEachOther() throws Exception {
        String name = TestSupport.unique("threads");
        AtomicInteger inside = new AtomicInteger();
        List<Integer> overlap = new CopyOnWriteArrayList<>();
        int[] counter = {0};
        Set<String> owners = Collections.synchronizedSet(new HashSet<>());
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        Runnable work = () -> {
            try {
                for (int i = 0; i < 15; i++) {
                    try (Lease lease = client.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(10)))) {
                        owners.add(client.inspect(name).holders().get(0).owner());
                        if (inside.incrementAndGet() > 1) {
                            overlap.add(lease.count());
                        }
                        int v = counter[0];
                        Thread.sleep(2);
                        counter[0] = v + 1;
                        inside.decrementAndGet();
                    }
                }
            } catch (Throwable e) {
                errors.add(e);
            }
        };
        Thread a = new Thread(work);
        Thread b = new Thread(work);
        a.start();
        b.start();
        a.join(30000);
        b.join(30000);
        assertEquals(List.of(), errors);
        assertEquals(List.of(), overlap);
        assertEquals(30, counter[0]);
        assertEquals(2, owners.size());
    }

    /**
     * Sixteen threads on one client, each on a lock of its own: lines of
     * several threads go out together and answers come in any order; none
     * may be left behind.
     */
    @Test
    void manyThreadsShareOneClient() throws Exception {
        try (LockBrokerClient c = LockBrokerClient.connect(TestSupport.brokerUrl())) {
            String prefix = TestSupport.unique("many");
            List<Integer> done = new CopyOnWriteArrayList<>();
            List<Throwable> errors = new CopyOnWriteArrayList<>();
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                int n = i;
                Thread t = new Thread(() -> {
                    try {
                        for (int k = 0; k < 40; k++) {
                            try (Lease l = c.lock(prefix + "-" + n, noWait())) {
                                assertTrue(l.isHeld());
                            }
                        }
                        done.add(n);
                    } catch (Throwable e) {
                        errors.add(e);
                    }
                });
                t.setDaemon(true);
                threads.add(t);
                t.start();
            }
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            for (Thread t : threads) {
                t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime())));
            }
            assertEquals(List.of(), errors);
            assertEquals(16, done.size());
            assertEquals(List.of(), c.leases());
        }
    }

    @Test
    void oneOwnerWhenTold() throws Exception {
        String name = TestSupport.unique("owner");
        try (LockBrokerClient shared = LockBrokerClient.connect(TestSupport.brokerUrl(),
                ClientOptions.defaults().owner("one-owner"))) {
            Lease a = shared.lock(name, noWait());
            AtomicReference<Lease> got = new AtomicReference<>();
            Thread t = new Thread(() -> got.set(shared.lock(name, noWait())));
            t.start();
            t.join(5000);
            assertEquals(a.token(), got.get().token());
            assertEquals(2, got.get().count());
            assertEquals("one-owner", got.get().owner());
            got.get().release();
            a.release();
        }
        // and per call
        try (Lease x = client.lock(name, noWait().owner("o")); Lease y = other.lock(TestSupport.unique("o2"), noWait())) {
            assertEquals("o", client.inspect(name).holders().get(0).owner());
            assertNotNull(y);
            Lease again = client.tryLock(name, Duration.ZERO, LockOptions.defaults().owner("o"));
            assertEquals(2, again.count());
            again.release();
            assertNotNull(x);
        }
    }

    @Test
    void detachedLeaseOutlivesItsClient() {
        String name = TestSupport.unique("detach");
        LockBrokerClient c = LockBrokerClient.connect(TestSupport.brokerUrl());
        Lease lease = c.lock(name, noWait().detach().ttl(Duration.ofSeconds(5)));
        assertTrue(lease.detached());
        c.close();
        assertFalse(lease.isLost());
        assertEquals("exclusive", client.inspect(name).state());
        assertEquals(Duration.ofSeconds(4), client.extendToken(lease.token(), Duration.ofSeconds(4)));
        assertEquals(0, client.releaseToken(lease.token()));
        assertEquals("free", client.inspect(name).state());
    }

    @Test
    void asyncApi() throws Exception {
        String name = TestSupport.unique("async");
        Lease lease = client.lockAsync(name, noWait()).get(5, TimeUnit.SECONDS);
        assertEquals(name, lease.name());
        assertNotEquals(LockBrokerClient.currentOwner(), lease.owner(), "an async acquire has an owner of its own");
        // another async acquire is not a re-entry: it times out
        ExecutionException e = assertThrows(ExecutionException.class,
                () -> client.lockAsync(name, noWait()).get(5, TimeUnit.SECONDS));
        assertTrue(e.getCause() instanceof LockTimeoutException, e.toString());
        assertEquals("up", client.pingAsync().get(5, TimeUnit.SECONDS));
        assertEquals("exclusive", client.inspectAsync(name).get(5, TimeUnit.SECONDS).state());
        assertEquals(Duration.ofSeconds(7), lease.extendAsync(Duration.ofSeconds(7)).get(5, TimeUnit.SECONDS));
        // a waiting acquire cancelled through its future leaves nothing behind
        CompletableFuture<Lease> waiting = other.lockAsync(name);
        assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 1, 3000));
        assertTrue(waiting.cancel(true));
        assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 0, 3000));
        assertEquals(0, lease.releaseAsync().get(5, TimeUnit.SECONDS));
        assertTrue(lease.isReleased());
        assertEquals("free", client.inspect(name).state());
        assertTrue(other.leases().stream().noneMatch(l -> l.lock().equals(name)));
        // the futures' stages run off the client's threads: they may call it back
        String n2 = TestSupport.unique("async2");
        Lease l2 = client.lockAsync(n2).thenApply(l -> {
            assertEquals("exclusive", client.inspect(n2).state());
            return l;
        }).get(5, TimeUnit.SECONDS);
        l2.release();
    }

    @Test
    void withLockReturnsAndReleases() {
        String name = TestSupport.unique("withlock");
        long fence = client.withLock(name, noWait(), Lease::fence);
        assertTrue(fence > 0);
        assertEquals("free", client.inspect(name).state());
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> client.withLock(name, noWait(), l -> {
                    throw new IllegalStateException("body");
                }));
        assertEquals("body", e.getMessage());
        assertEquals("free", client.inspect(name).state());
    }

    // ---- error codes the broker answers -------------------------------------

    @Test
    void invalidArgument() {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                () -> client.lock(TestSupport.unique("x"), LockOptions.defaults().ttl(Duration.ofMillis(5))));
        assertTrue(e.brokerMessage().contains("ttl_ms"), e.getMessage());
        assertEquals("acquire", e.op());
        assertThrows(InvalidArgumentException.class,
                () -> client.request("release", Map.of("lock", "x")));
    }

    @Test
    void unknownOpAndNotHeld() {
        UnknownOpException e = assertThrows(UnknownOpException.class, () -> client.request("frobnicate", null));
        assertEquals("unknown_op", e.code());
        assertThrows(NotHeldException.class, () -> client.releaseToken("0".repeat(32)));
        assertThrows(NotHeldException.class, () -> client.extendToken("0".repeat(32), Duration.ofSeconds(1)));
    }

    @Test
    void conflictAndUpgrade() {
        String name = TestSupport.unique("kind");
        try (Lease l = client.lock(name, noWait().shared())) {
            assertThrows(ConflictException.class, () -> client.lock(name, noWait().limit(3)));
            assertThrows(UpgradeUnsupportedException.class, () -> client.lock(name, noWait()));
            assertTrue(l.isHeld());
        }
    }

    @Test
    void lineTooLongIsRefusedBeforeSending() {
        LineTooLongException e = assertThrows(LineTooLongException.class,
                () -> client.request("ping", Map.of("pad", "x".repeat(70000))));
        assertTrue(e.brokerMessage().contains("max_line"));
        assertEquals("up", client.ping()); // the session lives on
    }

    @Test
    void timeoutAndCancelled() throws Exception {
        String name = TestSupport.unique("tc");
        try (Lease l = client.lock(name)) {
            assertThrows(LockTimeoutException.class, () -> other.lock(name, LockOptions.defaults().waitTime(Duration.ofMillis(50))));
            // cancelled by the broker's cancel, sent by hand for a request of our own
            CompletableFuture<Lease> f = other.lockAsync(name);
            assertTrue(TestSupport.waitUntil(() -> client.inspect(name).waiters() == 1, 3000));
            f.cancel(false);
            assertTrue(f.isCancelled());
            assertNotNull(l);
        }
    }

    // ---- auth and transports --------------------------------------------------

    @Test
    void authSecretValueAndFile() {
        String url = TestSupport.env("LOCKBROKER_AUTH_URL");
        try (LockBrokerClient c = LockBrokerClient.connect(url,
                ClientOptions.defaults().auth(TestSupport.env("LOCKBROKER_AUTH_SECRET")));
             Lease l = c.lock(TestSupport.unique("auth"), noWait())) {
            assertTrue(l.isHeld());
        }
        try (LockBrokerClient c = LockBrokerClient.connect(url,
                ClientOptions.defaults().authFile(Path.of(TestSupport.env("LOCKBROKER_AUTH_FILE"))));
             Lease l = c.lock(TestSupport.unique("authf"), noWait())) {
            assertTrue(l.isHeld());
        }
    }

    @Test
    void unauthorized() {
        String url = TestSupport.env("LOCKBROKER_AUTH_URL");
        UnauthorizedException e = assertThrows(UnauthorizedException.class,
                () -> LockBrokerClient.connect(url, ClientOptions.defaults().auth("wrong")));
        assertEquals("unauthorized", e.code());
        // no secret: the session opens, ping works, the rest is unauthorized
        try (LockBrokerClient c = LockBrokerClient.connect(url)) {
            assertNull(c.serverInfo());
            assertEquals("up", c.ping());
            assertThrows(UnauthorizedException.class, () -> c.lock(TestSupport.unique("noauth"), noWait()));
        }
        InvalidArgumentException bad = assertThrows(InvalidArgumentException.class,
                () -> LockBrokerClient.connect(url, ClientOptions.defaults().authFile(Path.of("/nonexistent/secret"))));
        assertTrue(bad.brokerMessage().contains("authFile"), bad.getMessage());
    }

    @Test
    void unixSocket() {
        String url = TestSupport.env("LOCKBROKER_UNIX_URL");
        try (LockBrokerClient c = LockBrokerClient.connect(url)) {
            String name = TestSupport.unique("unix");
            try (Lease l = c.lock(name, noWait())) {
                assertEquals(l.fence(), c.inspect(name).fence());
            }
        }
    }

    @Test
    void keepaliveKeepsAnIdleSession() throws Exception {
        try (LockBrokerClient c = LockBrokerClient.connect(TestSupport.brokerUrl(),
                ClientOptions.defaults().keepalive(Duration.ofMillis(600)))) {
            Lease lease = c.lock(TestSupport.unique("keepalive"), noWait());
            Object session = c.serverInfo().get("session");
            Thread.sleep(1300);
            assertFalse(lease.isLost());
            assertEquals(session, c.serverInfo().get("session"));
            lease.release();
        }
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> LockBrokerClient
                .connect(TestSupport.brokerUrl(), ClientOptions.defaults().keepalive(Duration.ofMillis(100))));
        assertSame(InvalidArgumentException.class, e.getClass());
    }

    @Test
    void closingTheClientLosesItsLeases() {
        LockBrokerClient c = LockBrokerClient.connect(TestSupport.brokerUrl());
        Lease lease = c.lock(TestSupport.unique("closed"), noWait());
        c.close();
        assertEquals("closed", lease.lostReason());
        DisconnectedException e = assertThrows(DisconnectedException.class, c::ping);
        assertTrue(e.brokerMessage().contains("closed"));
        LeaseLostException lost = assertThrows(LeaseLostException.class, lease::close);
        assertEquals("closed", lost.reason());
    }
}
