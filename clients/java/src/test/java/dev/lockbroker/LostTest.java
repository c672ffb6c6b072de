package dev.lockbroker;

// LostTest - leases lost while held, against the suite's broker: keys
// deleted from Redis behind the broker's back while the body runs (onLost
// fires on the callback thread, every call on the lease throws the loss,
// leaving the try-with-resources block throws LeaseLostException), a
// release racing the loss, max_hold, expiry without watchdog, a callback
// added late, and withLock.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockbroker.TestSupport.Resp;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class LostTest {
    static LockBrokerClient client;

    @BeforeAll
    static void connect() {
        client = LockBrokerClient.connect(TestSupport.brokerUrl());
    }

    @AfterAll
    static void close() {
        if (client != null) {
            client.close();
        }
    }

    @Test
    void lostWhileTheBodyRuns() throws Exception {
        String name = TestSupport.unique("lost");
        List<String> called = new CopyOnWriteArrayList<>();
        List<Lease> calledWith = new CopyOnWriteArrayList<>();
        Lease[] seen = new Lease[1];
        long fence;
        try (Resp redis = new Resp()) {
            LeaseLostException e = assertThrows(LeaseLostException.class, () -> {
                try (Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofMillis(600))
                        .waitTime(Duration.ZERO).onLost(l -> {
                            calledWith.add(l);
                            called.add(Thread.currentThread().getName());
                        }))) {
                    seen[0] = lease;
                    assertTrue(redis.deleteLock(name) >= 1, "no keys of the lock in Redis");
                    // The body's view: the loss comes with the next renewal (ttl/3)...
                    long t0 = System.nanoTime();
                    assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
                    assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(3));
                    assertEquals("gone", lease.lostReason());
                    assertFalse(lease.isHeld());
                    assertTrue(lease.isLost());
                    // (no call on the lease here: leaving the block reports the loss)
                }
            });
            assertEquals("gone", e.reason());
            assertEquals(name, e.lock());
            assertSame(seen[0], e.lease());
            assertEquals("lost", e.code());
            fence = seen[0].st.fence;
        }
        assertTrue(TestSupport.waitUntil(() -> called.size() == 1, 3000));
        assertEquals("lockbroker-callbacks", called.get(0));
        assertSame(seen[0], calledWith.get(0));
        assertTrue(seen[0].toString().contains("lost: gone"));
        // Every call on the lease throws the loss.
        assertThrows(LeaseLostException.class, seen[0]::check);
        assertThrows(LeaseLostException.class, seen[0]::fence);
        assertThrows(LeaseLostException.class, () -> seen[0].extend(Duration.ofSeconds(1)));
        assertThrows(LeaseLostException.class, seen[0]::release);
        // The lock is free again (its keys are gone), with a higher fence.
        try (Lease again = client.lock(name, LockOptions.defaults().waitTime(Duration.ZERO))) {
            assertTrue(again.fence() > fence);
        }
    }

    /** The body itself meets the loss (check, fence): leaving the block does not report it twice. */
    @Test
    void lossRaisedInTheBodyIsNotDoubled() throws Exception {
        String name = TestSupport.unique("lostbody");
        try (Resp redis = new Resp()) {
            LeaseLostException e = assertThrows(LeaseLostException.class, () -> {
                try (Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofMillis(600)))) {
                    redis.deleteLock(name);
                    lease.awaitLost(Duration.ofSeconds(3));
                    lease.check();
                }
            });
            assertEquals(0, e.getSuppressed().length, "the loss was reported twice");
        }
    }

    /** The keys vanish and the holder releases at once, before the watchdog noticed: a loss, never success. */
    @Test
    void releaseRacingTheLoss() {
        String name = TestSupport.unique("race");
        Lease l = client.lock(name, LockOptions.defaults().ttl(Duration.ofSeconds(30)));
        try (Resp redis = new Resp()) {
            redis.deleteLock(name);
        }
        LeaseLostException e = assertThrows(LeaseLostException.class, l::release);
        assertTrue(List.of("gone", "not_held").contains(e.reason()), e.reason());
        assertTrue(l.isLost());
    }

    @Test
    void maxHoldIsALoss() throws Exception {
        String name = TestSupport.unique("maxhold");
        List<Lease> called = new CopyOnWriteArrayList<>();
        Lease[] seen = new Lease[1];
        LeaseLostException e = assertThrows(LeaseLostException.class, () -> {
            try (Lease lease = client.lock(name, LockOptions.defaults().maxHold(Duration.ofMillis(300)).onLost(called::add))) {
                seen[0] = lease;
                assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
            }
        });
        assertEquals("max_hold", e.reason());
        assertSame(seen[0], e.lease());
        assertTrue(TestSupport.waitUntil(() -> called.size() == 1, 3000));
        assertSame(seen[0], called.get(0));
    }

    @Test
    void unrenewedLeaseExpires() throws Exception {
        String name = TestSupport.unique("nowatchdog");
        Lease lease = client.lock(name, LockOptions.defaults().ttl(Duration.ofMillis(400)).watchdog(false)
                .waitTime(Duration.ZERO));
        Thread.sleep(200);
        assertEquals(Duration.ofMillis(400), lease.extend(Duration.ofMillis(400))); // extend keeps it alive
        assertTrue(lease.awaitLost(Duration.ofSeconds(3)));
        assertEquals("expired", lease.lostReason());
        assertThrows(LeaseLostException.class, lease::release);
    }

    @Test
    void onLostAddedLateAndWhenLost() throws Exception {
        String name = TestSupport.unique("late");
        Lease lease = client.lock(name, LockOptions.defaults().maxHold(Duration.ofMillis(200)).waitTime(Duration.ZERO));
        var future = lease.whenLost();
        assertSame(lease, future.get(3, TimeUnit.SECONDS));
        List<Lease> called = new CopyOnWriteArrayList<>();
        lease.onLost(called::add);
        assertTrue(TestSupport.waitUntil(() -> called.size() == 1, 3000));
        assertThrows(LeaseLostException.class, lease::release);
    }

    /** withLock: the loss wins over what the body returned or threw. */
    @Test
    void withLockReportsTheLoss() {
        String name = TestSupport.unique("withlost");
        try (Resp redis = new Resp()) {
            LeaseLostException e = assertThrows(LeaseLostException.class,
                    () -> client.withLock(name, LockOptions.defaults().ttl(Duration.ofMillis(600)), l -> {
                        redis.deleteLock(name);
                        try {
                            assertTrue(l.awaitLost(Duration.ofSeconds(3)));
                        } catch (InterruptedException x) {
                            throw new AssertionError(x);
                        }
                        throw new IllegalStateException("the body's own failure");
                    }));
            assertEquals("gone", e.reason());
            assertEquals(1, e.getSuppressed().length);
            assertEquals("the body's own failure", e.getSuppressed()[0].getMessage());
        }
        try (Resp redis = new Resp()) {
            LeaseLostException e = assertThrows(LeaseLostException.class,
                    () -> client.withLock(name, LockOptions.defaults().ttl(Duration.ofMillis(600)), l -> {
                        redis.deleteLock(name);
                        try {
                            l.awaitLost(Duration.ofSeconds(3));
                        } catch (InterruptedException x) {
                            throw new AssertionError(x);
                        }
                        return "result";
                    }));
            assertEquals("gone", e.reason());
        }
    }
}
