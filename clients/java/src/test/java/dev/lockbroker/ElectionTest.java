package dev.lockbroker;

// ElectionTest - coordination beyond the mutex (PROTOCOL.md): elections
// (campaign, proclaim, resign, leader, observe), watch, lockAll all or
// nothing, and a watch (and an observer) that goes on across a broker
// restart.

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockbroker.TestSupport.PrivateBroker;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class ElectionTest {
    static LockBrokerClient a;
    static LockBrokerClient b;

    @BeforeAll
    static void connect() {
        String url = TestSupport.brokerUrl();
        a = LockBrokerClient.connect(url, ClientOptions.defaults().clientName("java-elect-a"));
        b = LockBrokerClient.connect(url, ClientOptions.defaults().clientName("java-elect-b"));
    }

    @AfterAll
    static void close() {
        if (a != null) {
            a.close();
            b.close();
        }
    }

    @Test
    void campaignLeaderProclaimObserveAndTheNextTerm() throws Exception {
        String name = TestSupport.unique("elect");
        Election ea = a.election(name);
        Election eb = b.election(name);
        assertEquals(Optional.empty(), ea.leader());
        List<Optional<Leader>> seen = new CopyOnWriteArrayList<>();
        CountDownLatch observed = new CountDownLatch(1);
        CountDownLatch sawB2 = new CountDownLatch(1);
        Thread observer = new Thread(() -> {
            try (Election.Observer o = eb.observe()) {
                for (;;) {
                    Optional<Leader> l = o.poll(Duration.ofSeconds(10));
                    if (l == null) {
                        return;
                    }
                    seen.add(l);
                    observed.countDown();
                    if (l.isPresent() && "b:2".equals(l.get().value())) {
                        sawB2.countDown();
                        return;
                    }
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        observer.start();
        assertTrue(observed.await(3, TimeUnit.SECONDS));
        assertEquals(Optional.empty(), seen.get(0));

        long first;
        AtomicLong second = new AtomicLong();
        Thread campaignB;
        try (Lease term = ea.campaign("a:1")) {
            first = term.fence();
            assertEquals(Optional.of(new Leader("a:1", first, "java-elect-a")), eb.leader());
            assertEquals("java-elect-a", eb.leader().get().client());
            assertEquals(first, ea.proclaim("a:2"));
            assertEquals("a:2", eb.leader().get().value());
            assertEquals(term, ea.lease());
            campaignB = new Thread(() -> {
                try (Lease t2 = eb.campaign("b:1")) {
                    second.set(t2.fence());
                    eb.proclaim("b:2");
                    // lead until observed (the broker may fold quick changes into one event)
                    sawB2.await(5, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            campaignB.start();
            Thread.sleep(300);
            assertEquals(0, second.get(), "two leaders");
        }
        assertNull(ea.lease());
        campaignB.join(5000);
        assertTrue(second.get() > first, "the next leader's term is not higher");
        observer.join(5000);
        List<String> values = new ArrayList<>();
        for (Optional<Leader> l : seen) {
            values.add(l.map(Leader::value).orElse(null));
        }
        assertNull(values.get(0));
        assertTrue(values.contains("a:1"), values.toString());
        assertTrue(values.contains("a:2"), values.toString());
        assertEquals("b:2", values.get(values.size() - 1));
        assertTrue(values.indexOf("a:2") < values.indexOf("b:2"));
    }

    @Test
    void resignEndsTheTerm() {
        String name = TestSupport.unique("resign");
        Election e = a.election(name);
        Lease term = e.campaign("x", LockOptions.defaults().waitTime(Duration.ZERO));
        assertTrue(e.leader().isPresent());
        e.resign();
        assertTrue(term.isReleased());
        assertEquals(Optional.empty(), e.leader());
        assertThrows(InvalidArgumentException.class, () -> e.proclaim("y"));
        e.resign(); // nothing to do
        // a second campaigner with waitTime 0 finds the place taken
        Lease t = e.campaign("x", LockOptions.defaults().waitTime(Duration.ZERO));
        assertThrows(LockTimeoutException.class,
                () -> b.election(name).campaign("y", LockOptions.defaults().waitTime(Duration.ZERO)));
        t.close();
    }

    @Test
    void aValueNeedsAnExclusiveLock() {
        assertThrows(InvalidArgumentException.class, () -> a.lock(TestSupport.unique("sv"),
                LockOptions.defaults().shared().value("x").waitTime(Duration.ZERO)));
        try (Lease lease = a.lock(TestSupport.unique("sh"), LockOptions.defaults().shared().waitTime(Duration.ZERO))) {
            assertThrows(InvalidArgumentException.class, () -> lease.proclaim("x"));
            assertTrue(lease.isHeld());
        }
    }

    @Test
    void lockAllIsAllOrNothing() {
        String x = TestSupport.unique("all-x");
        String y = TestSupport.unique("all-y");
        String z = TestSupport.unique("all-z");
        List<Lease> leases = a.lockAll(List.of(LockSpec.exclusive(y), LockSpec.shared(x)),
                LockOptions.defaults().ttl(Duration.ofSeconds(5)).waitTime(Duration.ZERO));
        assertEquals(List.of(y, x), List.of(leases.get(0).name(), leases.get(1).name()));
        assertEquals(List.of("exclusive", "shared"), List.of(leases.get(0).mode(), leases.get(1).mode()));
        assertThrows(LockTimeoutException.class, () -> b.lockAll(List.of(LockSpec.exclusive(z), LockSpec.exclusive(y)),
                LockOptions.defaults().waitTime(Duration.ofMillis(200))));
        assertEquals("free", b.inspect(z).state(), "the lock taken on the way was kept");
        for (Lease l : leases) {
            assertEquals(0, l.release());
        }
        assertThrows(InvalidArgumentException.class, () -> a.lockAll(x, x));
        // Two callers asking overlapping sets in opposite orders never deadlock.
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        Runnable ab = () -> run(errors, () -> hold(a.lockAll(List.of(LockSpec.exclusive(x), LockSpec.exclusive(y)),
                LockOptions.defaults().waitTime(Duration.ofSeconds(5)))));
        Runnable ba = () -> run(errors, () -> hold(b.lockAll(List.of(LockSpec.exclusive(y), LockSpec.exclusive(x)),
                LockOptions.defaults().waitTime(Duration.ofSeconds(5)))));
        for (int round = 0; round < 5; round++) {
            Thread t1 = new Thread(ab);
            Thread t2 = new Thread(ba);
            t1.start();
            t2.start();
            join(t1);
            join(t2);
        }
        assertEquals(List.of(), errors);
        // and asynchronously
        List<Lease> all = a.lockAllAsync(List.of(LockSpec.permit(z, 2)), LockOptions.defaults()).join();
        assertEquals("permit", all.get(0).mode());
        all.get(0).release();
    }

    private static void hold(List<Lease> leases) {
        TestSupport.sleep(5);
        for (Lease l : leases) {
            l.release();
        }
    }

    private static void run(List<Throwable> errors, Runnable r) {
        try {
            r.run();
        } catch (Throwable e) {
            errors.add(e);
        }
    }

    private static void join(Thread t) {
        try {
            t.join(10000);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    @Test
    void watchSeesEachChange() throws Exception {
        String name = TestSupport.unique("watched");
        try (Watch w = b.watch(name)) {
            assertEquals("free", w.poll(Duration.ofSeconds(3)).state());
            Lease lease = a.lock(name, LockOptions.defaults().waitTime(Duration.ZERO).value("v1"));
            LockInfo info = w.poll(Duration.ofSeconds(3));
            assertEquals("exclusive", info.state());
            assertEquals(lease.fence(), info.fence());
            assertEquals("v1", info.holders().get(0).value());
            assertEquals("v1", info.leader().get().value());
            lease.release();
            assertEquals("free", w.poll(Duration.ofSeconds(3)).state());
            assertNull(w.poll(Duration.ofMillis(300)), "an event for no change");
        }
        // a closed watch gives nothing, and the broker forgot it
        Watch w = b.watch(name);
        assertNotNull(w.poll(Duration.ofSeconds(3)));
        w.close();
        assertNull(w.poll(Duration.ofMillis(100)));
    }

    @Test
    void aWatchGoesOnAcrossABrokerRestart() throws Exception {
        try (PrivateBroker broker = new PrivateBroker().start();
             LockBrokerClient c = LockBrokerClient.connect(broker.url,
                     ClientOptions.defaults().backoff(Duration.ofMillis(20), Duration.ofMillis(200)));
             LockBrokerClient other = LockBrokerClient.connect(broker.url,
                     ClientOptions.defaults().backoff(Duration.ofMillis(20), Duration.ofMillis(200)))) {
            String name = TestSupport.unique("restart");
            try (Watch w = c.watch(name); Election.Observer o = c.election(name).observe()) {
                assertEquals("free", w.poll(Duration.ofSeconds(3)).state());
                assertEquals(Optional.empty(), o.poll(Duration.ofSeconds(3)));
                broker.kill();
                broker.start();
                LockInfo fresh = w.poll(Duration.ofSeconds(10));
                assertNotNull(fresh, "no state after the restart");
                Lease lease = null;
                for (int i = 0; i < 100 && lease == null; i++) {
                    try {
                        lease = other.lock(name, LockOptions.defaults().waitTime(Duration.ZERO).value("after"));
                    } catch (DisconnectedException e) {
                        Thread.sleep(50);
                    }
                }
                assertNotNull(lease);
                LockInfo info = w.poll(Duration.ofSeconds(5));
                while (info != null && !info.state().equals("exclusive")) {
                    info = w.poll(Duration.ofSeconds(5));
                }
                assertNotNull(info, "the change after the restart was not heard");
                assertEquals("after", info.holders().get(0).value());
                Optional<Leader> l = o.poll(Duration.ofSeconds(5));
                while (l != null && l.isEmpty()) {
                    l = o.poll(Duration.ofSeconds(5));
                }
                assertNotNull(l);
                assertEquals("after", l.get().value());
                assertFalse(lease.isLost());
                lease.release();
            }
        }
    }
}
