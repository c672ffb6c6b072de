package dev.lockbroker;

// FakeBrokerTest - every error code of protocol/PROTOCOL.md, sent by a
// broker over a connection (no real broker needed): a fake broker (a
// ServerSocket of the test's own) answers hello as a real one does and then
// each request with {"id":N,"ok":false,"error":{"code":C,"message":M}}; the
// caller must get C's own exception class carrying M unchanged and the
// request's op, from every request method (synchronous and asynchronous),
// the lease's included. Also what the client takes from hello (max_line),
// a broker that ends the session after an error tied to no request, hello
// refused, and a refused connect.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.lockbroker.TestSupport.FakeBroker;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class FakeBrokerTest {
    static final String TOKEN = "5dfd82e0c99b9794e05ffdf3a0c8a0af";

    private FakeBroker fake;
    private volatile String[] error; // {code, message}: the next answers; null: success
    private LockBrokerClient client;

    static String messageFor(String code, String op) {
        return "the fake broker's " + code + " for " + op + ": «détail» {\"quoted\"}";
    }

    private List<String> answer(Map<String, Object> msg) {
        Object id = msg.get("id");
        Object op = msg.get("op");
        if ("oversize".equals(op)) { // as a real broker after line_too_long: id null, closing, close
            return List.of(TestSupport.errorLine(null, "line_too_long", "the line is longer than max_line (65536 bytes)"),
                    "{\"event\":\"closing\",\"reason\":\"line_too_long\"}", TestSupport.CLOSE);
        }
        String[] e = error;
        if (e != null) {
            return List.of(TestSupport.errorLine(id, e[0], e[1]));
        }
        if ("acquire".equals(op)) {
            return List.of(TestSupport.okLine(id, "lease", TOKEN, "lock", msg.get("lock"), "mode", "exclusive",
                    "fence", 1795308363707125L, "ttl_ms", 10000L, "count", 1L));
        }
        if ("release".equals(op)) {
            return List.of(TestSupport.okLine(id, "count", 0L));
        }
        return List.of(TestSupport.okLine(id, "redis", "up"));
    }

    @BeforeEach
    void start() {
        fake = new FakeBroker(this::answer);
        client = LockBrokerClient.connect(fake.url, ClientOptions.defaults().livenessCheck(false));
    }

    @AfterEach
    void stop() {
        client.close();
        fake.close();
    }

    private Map<String, Function<LockBrokerClient, Object>> syncCalls() {
        Map<String, Function<LockBrokerClient, Object>> m = new LinkedHashMap<>();
        m.put("acquire", c -> c.lock("fake-lock", LockOptions.defaults().waitTime(Duration.ZERO)));
        m.put("inspect", c -> c.inspect("fake-lock"));
        m.put("ping", LockBrokerClient::ping);
        m.put("stats", LockBrokerClient::stats);
        m.put("leases", LockBrokerClient::leases);
        m.put("release", c -> c.releaseToken(TOKEN));
        m.put("extend", c -> c.extendToken(TOKEN, Duration.ofSeconds(1)));
        m.put("acquire_all", c -> c.lockAll("fake-a", "fake-b"));
        m.put("watch", c -> c.watch("fake-lock"));
        m.put("frobnicate", c -> c.request("frobnicate", Map.of("x", 1L)));
        return m;
    }

    private Map<String, Function<LockBrokerClient, CompletableFuture<?>>> asyncCalls() {
        Map<String, Function<LockBrokerClient, CompletableFuture<?>>> m = new LinkedHashMap<>();
        m.put("acquire", c -> c.lockAsync("fake-lock", LockOptions.defaults().waitTime(Duration.ZERO)));
        m.put("inspect", c -> c.inspectAsync("fake-lock"));
        m.put("ping", LockBrokerClient::pingAsync);
        m.put("acquire_all", c -> c.lockAllAsync(List.of(LockSpec.exclusive("a")), LockOptions.defaults()));
        m.put("frobnicate", c -> c.requestAsync("frobnicate", Map.of("x", 1L)));
        return m;
    }

    private static void assertCode(LockBrokerException e, String code, String op, String message) {
        assertSame(LockBrokerException.forCode(code, "", null, null).getClass(), e.getClass(), code + " for " + op);
        assertEquals(code, e.code());
        assertEquals(message, e.brokerMessage());
        assertEquals(op, e.op());
    }

    @Test
    void everyCodeReachesTheCallerAsItsClass() {
        List<String> codes = ErrorTableTest.documentedCodes();
        assertEquals(codes.size(), LockBrokerException.knownCodes().size());
        for (String code : codes) {
            for (Map.Entry<String, Function<LockBrokerClient, Object>> call : syncCalls().entrySet()) {
                String op = call.getKey();
                error = new String[] {code, messageFor(code, op)};
                LockBrokerException e = assertThrows(LockBrokerException.class, () -> call.getValue().apply(client),
                        code + " for " + op);
                assertCode(e, code, op, messageFor(code, op));
                // It travelled: the fake answered the request it received last.
                List<Object> ops = fake.ops(0);
                assertEquals(op, ops.get(ops.size() - 1));
            }
        }
        // None of them ended the session.
        assertEquals(1, fake.accepts.size());
        assertEquals("s1", client.serverInfo().get("session"));
    }

    @Test
    void everyCodeFailsTheFutures() throws Exception {
        for (String code : ErrorTableTest.documentedCodes()) {
            for (Map.Entry<String, Function<LockBrokerClient, CompletableFuture<?>>> call : asyncCalls().entrySet()) {
                String op = call.getKey();
                error = new String[] {code, messageFor(code, op)};
                CompletableFuture<?> f = call.getValue().apply(client);
                ExecutionException ee = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
                assertTrue(ee.getCause() instanceof LockBrokerException, ee.toString());
                assertCode((LockBrokerException) ee.getCause(), code, op, messageFor(code, op));
            }
        }
        assertEquals(1, fake.accepts.size());
    }

    @Test
    void leaseCallsRaiseTheCodesToo() {
        error = null;
        Lease lease = client.lock("fake-lock", LockOptions.defaults().waitTime(Duration.ZERO));
        assertEquals(TOKEN, lease.token());
        for (String code : ErrorTableTest.documentedCodes()) {
            if (code.equals("not_held")) {
                continue; // a lease the broker no longer has: LeaseLostException, below
            }
            Map<String, Runnable> calls = new LinkedHashMap<>();
            calls.put("extend", () -> lease.extend(Duration.ofSeconds(1)));
            calls.put("release", lease::release);
            calls.put("proclaim", () -> lease.proclaim("v"));
            for (Map.Entry<String, Runnable> call : calls.entrySet()) {
                error = new String[] {code, messageFor(code, call.getKey())};
                LockBrokerException e = assertThrows(LockBrokerException.class, call.getValue()::run);
                assertCode(e, code, call.getKey(), messageFor(code, call.getKey()));
                assertTrue(lease.isHeld(), "an error is not a loss");
            }
            error = new String[] {code, messageFor(code, "extend")};
            ExecutionException ee = assertThrows(ExecutionException.class,
                    () -> lease.extendAsync(Duration.ofSeconds(1)).get(5, TimeUnit.SECONDS));
            assertCode((LockBrokerException) ee.getCause(), code, "extend", messageFor(code, "extend"));
        }
        error = new String[] {"not_held", messageFor("not_held", "release")};
        LeaseLostException lost = assertThrows(LeaseLostException.class, lease::release);
        assertEquals("not_held", lost.reason());
        assertEquals("lost", lost.code());
        assertSame(lease, lost.lease());
        assertSame(NotHeldException.class, lost.getCause().getClass());
        assertEquals(messageFor("not_held", "release"), ((NotHeldException) lost.getCause()).brokerMessage());
        assertEquals("not_held", lease.lostReason());
        assertTrue(lease.isLost());
        // reported once: leaving the scope now adds nothing
        lease.close();
    }

    @Test
    void helloLimitsMaxLine() {
        fake.limits.put("max_line", 300L);
        client.close();
        client = LockBrokerClient.connect(fake.url, ClientOptions.defaults().livenessCheck(false));
        assertEquals("up", client.ping());
        Map<String, Object> info = client.serverInfo();
        assertEquals(FakeBroker.SERVER, info.get("server"));
        assertEquals(1L, info.get("proto"));
        assertEquals(300L, ((Map<?, ?>) info.get("limits")).get("max_line"));
        LineTooLongException e = assertThrows(LineTooLongException.class,
                () -> client.request("echo", Map.of("pad", "x".repeat(300))));
        assertTrue(e.brokerMessage().contains("max_line"), e.getMessage());
        client.request("echo", Map.of("pad", "x".repeat(200))); // under the limit: sent
        assertEquals(List.of("hello", "ping", "echo"), fake.ops(2));
    }

    @Test
    void errorTiedToNoRequestThenClosing() {
        DisconnectedException e = assertThrows(DisconnectedException.class, () -> client.request("oversize", null));
        assertTrue(e.brokerMessage().contains("the broker closed it: line_too_long"), e.getMessage());
        assertEquals("oversize", e.op());
        // The next request opens a new session, at once.
        assertEquals("up", client.ping());
        assertEquals("s2", client.serverInfo().get("session"));
    }

    @Test
    void helloRefused() {
        fake.helloError = "unauthorized";
        // With a secret: connect fails with the code.
        UnauthorizedException e = assertThrows(UnauthorizedException.class,
                () -> LockBrokerClient.connect(fake.url, ClientOptions.defaults().auth("wrong")));
        assertEquals("hello", e.op());
        // Without one, the session opens (as lockctl): the broker answers the rest itself.
        try (LockBrokerClient c = LockBrokerClient.connect(fake.url)) {
            assertNull(c.serverInfo());
            assertEquals("up", c.ping());
        }
        fake.helloError = "invalid_argument";
        assertThrows(InvalidArgumentException.class, () -> LockBrokerClient.connect(fake.url));
        // The secret travelled in hello.
        boolean sawAuth = fake.received.stream().anyMatch(r -> "wrong".equals(r.msg.get("auth")));
        assertTrue(sawAuth);
    }

    /** A refused connect fails at once, not after the connect timeout. */
    @Test
    void refusedConnectFailsFast() {
        int port = TestSupport.freePort();
        long t0 = System.nanoTime();
        DisconnectedException e = assertThrows(DisconnectedException.class, () -> LockBrokerClient.connect(
                "tcp://127.0.0.1:" + port, ClientOptions.defaults().connectTimeout(Duration.ofSeconds(30))));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms < 1000, "a refused connect took " + ms + " ms");
        assertTrue(e.brokerMessage().startsWith("cannot connect to tcp://127.0.0.1:" + port), e.getMessage());
        assertTrue(e instanceof UnavailableException);
        assertEquals("disconnected", e.code());
        // A Unix socket that is not there: the same.
        t0 = System.nanoTime();
        assertThrows(DisconnectedException.class, () -> LockBrokerClient.connect("unix:///nonexistent/lb.sock"));
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 1000);
    }

    /** Hello never answered: the connect timeout bounds the wait. */
    @Test
    void silentBrokerTimesOutTheConnect() throws Exception {
        try (java.net.ServerSocket ss = new java.net.ServerSocket(0, 5, java.net.InetAddress.getLoopbackAddress())) {
            long t0 = System.nanoTime();
            DisconnectedException e = assertThrows(DisconnectedException.class, () -> LockBrokerClient.connect(
                    "tcp://127.0.0.1:" + ss.getLocalPort(),
                    ClientOptions.defaults().connectTimeout(Duration.ofMillis(300))));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(ms >= 250 && ms < 3000, ms + " ms");
            assertTrue(e.brokerMessage().contains("hello not answered"), e.getMessage());
        }
    }

    @Test
    void requestRefusesWhatTheClientOwns() {
        assertThrows(InvalidArgumentException.class, () -> client.request("ping", Map.of("id", 7L)));
        assertThrows(InvalidArgumentException.class, () -> client.request("acquire", Map.of("lock", "x")));
        assertThrows(InvalidArgumentException.class, () -> client.inspect("lone \ud800"));
        assertFalse(fake.ops(0).contains("acquire"));
    }

    /** The client's interrupt handling: an interrupted wait is cancelled at the broker. */
    @Test
    void interruptedLockSendsCancel() throws Exception {
        FakeBroker slow = new FakeBroker(msg -> {
            Object id = msg.get("id");
            if ("acquire".equals(msg.get("op"))) {
                return List.of(); // never answered: the acquire waits
            }
            if ("cancel".equals(msg.get("op"))) {
                return List.of(TestSupport.okLine(id, "cancelled", true),
                        TestSupport.errorLine(msg.get("target"), "cancelled", "cancelled by request"));
            }
            return List.of(TestSupport.okLine(id, "redis", "up"));
        });
        try (slow; LockBrokerClient c = LockBrokerClient.connect(slow.url)) {
            Thread me = Thread.currentThread();
            Thread t = new Thread(() -> {
                TestSupport.sleep(200);
                me.interrupt();
            });
            t.start();
            CancelledException e = assertThrows(CancelledException.class, () -> c.lock("waits"));
            assertTrue(Thread.interrupted(), "the interrupt status was not kept");
            assertTrue(e.getCause() instanceof InterruptedException);
            assertTrue(TestSupport.waitUntil(() -> slow.ops(0).contains("cancel"), 3000), "no cancel sent");
            long target = (Long) slow.received.stream().filter(r -> "cancel".equals(r.msg.get("op"))).findFirst()
                    .get().msg.get("target");
            long acquireId = (Long) slow.received.stream().filter(r -> "acquire".equals(r.msg.get("op")))
                    .findFirst().get().msg.get("id");
            assertEquals(acquireId, target);
            assertEquals("up", c.ping()); // the session goes on
            // Interrupted before the call: nothing is sent.
            Thread.currentThread().interrupt();
            assertThrows(CancelledException.class, () -> c.lock("never"));
            assertTrue(Thread.interrupted());
            assertFalse(slow.received.stream().anyMatch(r -> "never".equals(r.msg.get("lock"))));
            // A cancelled future cancels too.
            CompletableFuture<Lease> f = c.lockAsync("waits-async");
            assertTrue(TestSupport.waitUntil(
                    () -> slow.received.stream().anyMatch(r -> "waits-async".equals(r.msg.get("lock"))), 3000));
            f.cancel(true);
            assertTrue(TestSupport.waitUntil(
                    () -> slow.received.stream().filter(r -> "cancel".equals(r.msg.get("op"))).count() == 2, 3000));
        } catch (Exception e) {
            fail(e);
        }
    }
}
