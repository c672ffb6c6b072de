package dev.lockbroker;

// BrokerProcessTest - brokers of the test's own (LOCKBROKER_BIN): killed
// while a lease is held (the lease is lost, reason "disconnected"; a thread
// waiting on the same client fails; requests fail fast while it is down;
// the client reconnects once it is back, and the old token is never sent
// again: a proxy records every line the client writes), frozen (SIGSTOP:
// the liveness check gives the session up; issue 26's scenario: with the
// default options the holder hears of its loss before a waiter on another
// broker of the same Redis is granted the lock), and the error codes that
// need a broker set up for them: limit_exceeded, unavailable, shutting_down.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockbroker.TestSupport.LoggingProxy;
import dev.lockbroker.TestSupport.PrivateBroker;
import dev.lockbroker.TestSupport.PrivateRedis;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestReporter;

class BrokerProcessTest {
    static boolean pings(LockBrokerClient c) {
        try {
            return c.ping().equals("up");
        } catch (DisconnectedException e) {
            return false;
        }
    }

    @Test
    void killedBrokerLosesLeasesAndReconnects() throws Exception {
        try (PrivateBroker broker = new PrivateBroker().start();
             LockBrokerClient client = LockBrokerClient.connect(broker.url, ClientOptions.defaults()
                     .connectTimeout(Duration.ofMillis(500)).backoff(Duration.ofMillis(20), Duration.ofMillis(200)))) {
            List<Lease> called = new CopyOnWriteArrayList<>();
            String name = TestSupport.unique("killed");
            Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofSeconds(2)).waitTime(Duration.ZERO)
                    .onLost(called::add));
            Lease detached = client.lock(TestSupport.unique("killed-detached"),
                    LockOptions.defaults().detach().ttl(Duration.ofSeconds(5)));
            Object firstBroker = client.serverInfo().get("broker");

            // A second thread waits for the lock on the same client.
            AtomicReference<Throwable> waiting = new AtomicReference<>();
            Thread t = new Thread(() -> {
                try {
                    client.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(10)));
                } catch (Throwable e) {
                    waiting.set(e);
                }
            });
            t.start();
            Thread.sleep(100);

            LeaseLostException e = assertThrows(LeaseLostException.class, () -> {
                try (Lease l = lease) {
                    broker.kill();
                    assertTrue(l.awaitLost(Duration.ofSeconds(3)));
                    assertEquals("disconnected", l.lostReason());
                }
            });
            assertEquals("disconnected", e.reason());
            t.join(3000);
            assertTrue(waiting.get() instanceof DisconnectedException, String.valueOf(waiting.get()));
            assertTrue(TestSupport.waitUntil(() -> called.size() == 1, 3000));
            assertSame(lease, called.get(0));
            assertFalse(detached.isLost(), "a detached lease outlives its session");

            // While the broker is down, requests fail within the connect timeout (500 ms).
            long t0 = System.nanoTime();
            assertThrows(DisconnectedException.class, client::ping);
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2));

            broker.start(); // same port
            assertTrue(TestSupport.waitUntil(() -> pings(client), 5000), "no reconnect after the restart");
            assertNotEquals(firstBroker, client.serverInfo().get("broker"), "not a new broker process");
            try (Lease again = client.lock(TestSupport.unique("after"), LockOptions.defaults().waitTime(Duration.ZERO))) {
                assertTrue(again.isHeld());
            }
            // The old lease stays lost; its token is never sent on the new
            // session: the new broker counts no release for it. (Its count
            // has the readiness probe's and "after"'s.)
            assertTrue(TestSupport.waitUntil(() -> (Long) client.stats().get("released_total") >= 2, 3000));
            Object before = client.stats().get("released_total");
            assertThrows(LeaseLostException.class, lease::release);
            assertThrows(LeaseLostException.class, () -> lease.extend(Duration.ofSeconds(1)));
            assertEquals(before, client.stats().get("released_total"));
            // A detached lease may be released from the new session.
            assertEquals(0, detached.release());
        }
    }

    /**
     * Once the client had a session, a call made while the broker restarts
     * waits for it (connects again with the backoff) within the connect
     * timeout, synchronous and asynchronous alike.
     */
    @Test
    void aCallDuringARestartWaitsForTheBroker() throws Exception {
        try (PrivateBroker broker = new PrivateBroker().start();
             LockBrokerClient client = LockBrokerClient.connect(broker.url, ClientOptions.defaults()
                     .connectTimeout(Duration.ofSeconds(8)).backoff(Duration.ofMillis(20), Duration.ofMillis(200)))) {
            for (int round = 0; round < 2; round++) {
                broker.kill();
                AtomicReference<Throwable> restart = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(400);
                        broker.start();
                    } catch (Throwable e) {
                        restart.set(e);
                    }
                });
                t.start();
                long t0 = System.nanoTime();
                String name = TestSupport.unique("restart");
                for (int tries = 0;; tries++) {
                    // A broker just started may answer unavailable until its
                    // scripts are loaded; never disconnected: the call waits.
                    try {
                        if (round == 0) {
                            try (Lease l = client.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(2)))) {
                                assertTrue(l.isHeld());
                            }
                        } else {
                            client.lockAsync(name).get(10, TimeUnit.SECONDS).release();
                        }
                        break;
                    } catch (UnavailableException | java.util.concurrent.ExecutionException e) {
                        Throwable cause = e instanceof UnavailableException ? e : e.getCause();
                        if (cause instanceof DisconnectedException || !(cause instanceof UnavailableException)
                                || tries > 50) {
                            throw e;
                        }
                        Thread.sleep(50);
                    }
                }
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                t.join(10000);
                assertEquals(null, restart.get());
                assertTrue(ms >= 300 && ms < 8000, "granted after " + ms + " ms");
            }
        }
    }

    @Test
    void oldTokenIsNeverWrittenOnANewSession() throws Exception {
        try (PrivateBroker broker = new PrivateBroker().start();
             LoggingProxy proxy = new LoggingProxy(broker.port);
             LockBrokerClient client = LockBrokerClient.connect(proxy.url,
                     ClientOptions.defaults().backoff(Duration.ofMillis(20), Duration.ofMillis(200)))) {
            Lease lease = client.lock(TestSupport.unique("old-token"),
                    LockOptions.defaults().ttl(Duration.ofSeconds(5)).waitTime(Duration.ZERO));
            Lease detached = client.lock(TestSupport.unique("old-token-detached"),
                    LockOptions.defaults().detach().ttl(Duration.ofSeconds(5)));
            assertEquals(Duration.ofSeconds(4), lease.extend(Duration.ofSeconds(4)));
            assertEquals(1, proxy.written(lease.token(), 1).size()); // the proxy sees tokens sent

            broker.kill();
            assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
            broker.start();
            assertTrue(TestSupport.waitUntil(() -> pings(client), 5000));
            assertTrue(proxy.accepts.size() >= 2);
            for (Runnable call : List.<Runnable>of(lease::release, () -> lease.extend(Duration.ofSeconds(1)),
                    lease::check, lease::fence)) {
                LeaseLostException e = assertThrows(LeaseLostException.class, call::run);
                assertEquals("disconnected", e.reason());
            }
            assertEquals(0, detached.release());
            client.ping(); // answered: every line written before it is recorded
            assertEquals(1, proxy.written(detached.token(), 2).size());
            assertEquals(List.of(), proxy.written(lease.token(), 2));
            assertEquals(1, proxy.written(lease.token(), 1).size()); // the extend, on session 1
        }
    }

    /** A broker frozen with its socket open: the liveness check gives the session up within the bound. */
    @Test
    void silentBrokerIsGivenUp() throws Exception {
        try (PrivateBroker broker = new PrivateBroker().start();
             LockBrokerClient client = LockBrokerClient.connect(broker.url,
                     ClientOptions.defaults().connectTimeout(Duration.ofMillis(300)))) {
            // ttl 1500 ms: the bound is 500 ms, pings every ~167 ms
            Lease lease = client.lock(TestSupport.unique("silent"),
                    LockOptions.defaults().ttl(Duration.ofMillis(1500)).waitTime(Duration.ZERO));
            Thread.sleep(700); // alive: pings are answered
            assertFalse(lease.isLost());
            broker.signal("STOP");
            try {
                long t0 = System.nanoTime();
                assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(ms < 1200, "lost after " + ms + " ms");
                assertEquals("disconnected", lease.lostReason());
            } finally {
                broker.signal("CONT");
            }
            assertTrue(TestSupport.waitUntil(() -> pings(client), 5000));
        }
    }

    /**
     * Issue 26's scenario, with the default client options (the liveness
     * check is on by default): holder A on broker 1 and waiter B on broker
     * 2, both brokers on one redis-server of the test's own; broker 1 is
     * frozen (SIGSTOP) with its socket open. A must hear of its loss (onLost,
     * reason "disconnected") within about ttl/3 of the freeze, and before B
     * is granted the lock, which Redis allows once A's lease runs out there
     * (about a ttl after the freeze): never two holders.
     */
    @Test
    void frozenBrokersHolderHearsOfItsLossBeforeTheWaiterIsGranted(TestReporter reporter) throws Exception {
        final long ttlMs = 3000;
        try (PrivateRedis redis = new PrivateRedis();
             PrivateBroker broker1 = PrivateBroker.withRedis(redis.url).start();
             PrivateBroker broker2 = PrivateBroker.withRedis(redis.url).start();
             LockBrokerClient holder = LockBrokerClient.connect(broker1.url, ClientOptions.defaults());
             LockBrokerClient waiter = LockBrokerClient.connect(broker2.url, ClientOptions.defaults())) {
            String name = TestSupport.unique("frozen");
            AtomicLong lostAt = new AtomicLong();
            AtomicLong grantedAt = new AtomicLong();
            AtomicReference<Throwable> waitError = new AtomicReference<>();
            Lease lease = holder.lock(name, LockOptions.defaults().ttl(Duration.ofMillis(ttlMs))
                    .waitTime(Duration.ZERO).onLost(l -> lostAt.compareAndSet(0, System.nanoTime())));
            Thread w = new Thread(() -> {
                try {
                    Lease got = waiter.lock(name, LockOptions.defaults().waitTime(Duration.ofSeconds(30)));
                    grantedAt.set(System.nanoTime());
                    got.release();
                } catch (Throwable e) {
                    waitError.set(e);
                }
            }, "frozen-broker-waiter");
            w.setDaemon(true);
            w.start();
            assertTrue(TestSupport.waitUntil(() -> waiter.inspect(name).waiters() == 1, 5000),
                    "the waiter did not queue on broker 2");

            // A live broker keeps the lease held: the pings are answered.
            Thread.sleep(ttlMs / 2);
            assertFalse(lease.isLost(), "lost while broker 1 ran: " + lease.lostReason());
            assertEquals(0, grantedAt.get(), "the waiter was granted a held lock");

            long stopped = System.nanoTime();
            broker1.signal("STOP");
            try {
                w.join(20000); // the grant comes about a ttl after the freeze
                TestSupport.waitUntil(() -> lostAt.get() != 0, 1000);
            } finally {
                broker1.signal("CONT");
            }
            assertEquals(null, waitError.get(), "the waiter failed");
            assertTrue(grantedAt.get() != 0, "the waiter was not granted within 20 s of the freeze");
            long grantedMs = TimeUnit.NANOSECONDS.toMillis(grantedAt.get() - stopped);
            assertTrue(lostAt.get() != 0, "the holder never heard of its loss while broker 1 was frozen"
                    + " (the waiter was granted " + grantedMs + " ms after the freeze)");
            long lostMs = TimeUnit.NANOSECONDS.toMillis(lostAt.get() - stopped);
            reporter.publishEntry("after SIGSTOP", "holder lost at " + lostMs + " ms, waiter granted at "
                    + grantedMs + " ms (ttl " + ttlMs + " ms)");
            assertTrue(lostAt.get() < grantedAt.get(), "two holders: the waiter was granted " + grantedMs
                    + " ms after the freeze, the holder heard of its loss only " + lostMs + " ms after");
            assertEquals("disconnected", lease.lostReason());
            // about ttl/3 (1000 ms); the margin is for a loaded 2-core machine
            assertTrue(lostMs < ttlMs / 3 + 1500, "lost " + lostMs + " ms after the freeze (ttl " + ttlMs + " ms)");
        }
    }

    @Test
    void limitExceeded() {
        try (PrivateBroker broker = new PrivateBroker("--max-leases-per-session", "1").start();
             LockBrokerClient c = LockBrokerClient.connect(broker.url);
             Lease one = c.lock(TestSupport.unique("one"), LockOptions.defaults().waitTime(Duration.ZERO))) {
            LimitExceededException e = assertThrows(LimitExceededException.class,
                    () -> c.lock(TestSupport.unique("two"), LockOptions.defaults().waitTime(Duration.ZERO)));
            assertEquals("limit_exceeded", e.code());
            assertTrue(one.isHeld());
        }
    }

    @Test
    void unavailable() {
        try (PrivateBroker broker = PrivateBroker.withRedis("redis://127.0.0.1:" + TestSupport.freePort()).start(false);
             LockBrokerClient c = LockBrokerClient.connect(broker.url)) {
            assertEquals("down", c.ping());
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> c.lock(TestSupport.unique("noredis"), LockOptions.defaults().waitTime(Duration.ZERO)));
            assertSame(UnavailableException.class, e.getClass());
            assertEquals("unavailable", e.code());
        }
    }

    @Test
    void shuttingDown() {
        try (PrivateBroker broker = new PrivateBroker("--shutdown-grace-ms", "3000").start();
             LockBrokerClient c = LockBrokerClient.connect(broker.url)) {
            Lease lease = c.lock(TestSupport.unique("stopping"), LockOptions.defaults().waitTime(Duration.ZERO));
            broker.signal("TERM");
            assertTrue(TestSupport.waitUntil(() -> {
                try {
                    c.lock(TestSupport.unique("late"), LockOptions.defaults().waitTime(Duration.ZERO)).release();
                    return false;
                } catch (ShuttingDownException e) {
                    return true;
                }
            }, 2000));
            lease.release();
        }
    }
}
