"""Coordination beyond the mutex in the threaded client (issue 27):
elections (campaign, proclaim, leader, observe), watch, lock_all, and a
watch (and an observer) that goes on across a broker restart."""

import threading
import time
import unittest

import lockbroker
from tests.support import PrivateBroker, need_broker, unique, wait_until


class ElectionTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_broker()
        cls.a = lockbroker.Client(label="py-elect-a")
        cls.b = lockbroker.Client(label="py-elect-b")

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()

    def test_campaign_leader_proclaim_and_the_next_term(self):
        name = unique("elect")
        ea, eb = self.a.election(name), self.b.election(name)
        self.assertIsNone(ea.leader())
        seen = []
        stop = threading.Event()

        def observe():
            for leader in eb.observe():
                seen.append(leader)
                if stop.is_set() and leader is not None and leader.value == "b:2":
                    return

        t = threading.Thread(target=observe, daemon=True)
        t.start()
        self.assertTrue(wait_until(lambda: seen == [None], 3), seen)
        with ea.campaign("a:1") as term:
            first = term.fence
            self.assertEqual(eb.leader(), lockbroker.Leader("a:1", first, ""))
            self.assertEqual(term.proclaim("a:2"), first)
            self.assertEqual(eb.leader().value, "a:2")
            got = {}

            def campaign_b():
                with eb.campaign("b:1") as t2:
                    got["term"] = t2.fence
                    # Set before the proclaim: an observer that saw b:2
                    # before the flag was up went on to the resign (None).
                    stop.set()
                    t2.proclaim("b:2")

            tb = threading.Thread(target=campaign_b, daemon=True)
            tb.start()
            time.sleep(0.3)
            self.assertNotIn("term", got, "two leaders")
        tb.join(5)
        self.assertGreater(got["term"], first, "the next leader's term is not higher")
        t.join(5)
        values = [x.value if x else None for x in seen]
        self.assertEqual(values[0], None)
        self.assertIn("a:1", values)
        self.assertIn("a:2", values)
        self.assertEqual(values[-1], "b:2")
        self.assertLess(values.index("a:2"), values.index("b:2"))

    def test_a_value_needs_an_exclusive_lock(self):
        with self.assertRaises(lockbroker.InvalidArgument):
            self.a.acquire(unique("sv"), mode="shared", value="x", wait_ms=0)
        with self.a.lock(unique("sh"), mode="shared", wait_ms=0) as lease:
            with self.assertRaises(lockbroker.InvalidArgument):
                lease.proclaim("x")

    def test_lock_all_all_or_nothing(self):
        x, y, z = unique("all-x"), unique("all-y"), unique("all-z")
        leases = self.a.lock_all([y, {"lock": x, "mode": "shared"}], ttl_ms=5000, wait_ms=0)
        self.assertEqual([l.name for l in leases], [y, x])
        self.assertEqual([l.mode for l in leases], ["exclusive", "shared"])
        with self.assertRaises(lockbroker.LockTimeout):
            self.b.lock_all([z, y], wait_ms=200)
        self.assertEqual(self.b.inspect(z).state, "free", "the lock taken on the way was kept")
        for l in leases:
            self.assertEqual(l.release(), 0)
        with self.assertRaises(lockbroker.InvalidArgument):
            self.a.lock_all([x, x])

    def test_watch_sees_each_change(self):
        name = unique("watched")
        with self.b.watch(name) as w:
            self.assertEqual(w.get(3).state, "free")
            lease = self.a.acquire(name, wait_ms=0, lock_delay_ms=0)
            info = w.get(3)
            self.assertEqual((info.state, info.fence), ("exclusive", lease.fence))
            lease.release()
            self.assertEqual(w.get(3).state, "free")
            self.assertIsNone(w.get(0.3), "an event for no change")


class ReconnectTests(unittest.TestCase):
    def test_a_watch_goes_on_across_a_broker_restart(self):
        need_broker()
        broker = PrivateBroker().start()
        try:
            c = lockbroker.Client(broker.url, label="py-watch-restart")
            other = lockbroker.Client(broker.url, label="py-watch-other")
            name = unique("restart")
            w = c.watch(name)
            self.assertEqual(w.get(3).state, "free")
            broker.kill()
            broker.start()
            fresh = w.get(10)
            self.assertIsNotNone(fresh, "no state after the restart")
            lease = other.acquire(name, wait_ms=0, value="after")
            info = w.get(5)
            while info is not None and info.state != "exclusive":
                info = w.get(5)
            self.assertIsNotNone(info, "the change after the restart was not heard")
            self.assertEqual(info.leader.value, "after")
            lease.release()
            w.close()
            c.close()
            other.close()
        finally:
            broker.stop()


if __name__ == "__main__":
    unittest.main()


class AsyncElectionTests(unittest.IsolatedAsyncioTestCase):
    async def test_campaign_watch_lock_all(self):
        need_broker()
        async with lockbroker.AsyncClient(label="py-aio-elect") as a, \
                lockbroker.AsyncClient(label="py-aio-other") as b:
            name = unique("aio-elect")
            ea = a.election(name)
            self.assertIsNone(await ea.leader())
            watch = b.watch(name)
            self.assertEqual((await watch.__anext__()).state, "free")
            async with ea.campaign("a:1") as term:
                info = await watch.__anext__()
                self.assertEqual((info.leader.value, info.fence), ("a:1", term.fence))
                self.assertEqual(await term.proclaim("a:2"), term.fence)
                info = await watch.__anext__()
                self.assertEqual(info.leader.value, "a:2")
                self.assertEqual((await b.election(name).leader()).value, "a:2")
            self.assertEqual((await watch.__anext__()).state, "free")
            await watch.aclose()
            x, y = unique("aio-x"), unique("aio-y")
            leases = await a.lock_all([y, x], wait_ms=0)
            self.assertEqual([l.name for l in leases], [y, x])
            with self.assertRaises(lockbroker.LockTimeout):
                await b.lock_all([x], wait_ms=100)
            for l in leases:
                await l.release()


class LabelTests(unittest.TestCase):
    def test_the_default_label_has_the_common_shape(self):
        import re
        from lockbroker._core import default_label
        label = default_label()
        self.assertRegex(label, r"^.+\[\d+\]@\S+ lockbroker-python/\S+$")
        self.assertLessEqual(len(label.encode()), 128)


class CampaignAgainTests(unittest.TestCase):
    def test_a_campaign_goes_on_across_a_broker_restart(self):
        need_broker()
        broker = PrivateBroker().start()
        try:
            c = lockbroker.Client(broker.url, label="py-campaigner")
            name = unique("again")
            terms, fences = [], []
            for term in c.election(name).campaigns("me", ttl_ms=1000):
                terms.append(term)
                fences.append(term.fence)
                if len(terms) == 1:
                    broker.kill()           # leadership lost with the connection
                    self.assertTrue(wait_until(lambda: term.lost.is_set(), 5), "the loss was not reported")
                    self.assertIsNotNone(term.lost_reason)
                    broker.start()
                    continue
                break
            self.assertEqual(len(terms), 2)
            self.assertGreater(fences[1], fences[0], "the new term is not higher")
            self.assertTrue(terms[1].held)
            terms[1].release()
            c.close()
        finally:
            broker.stop()


class AsyncCampaignAgainTests(unittest.IsolatedAsyncioTestCase):
    async def test_async_campaigns_go_on_across_a_broker_restart(self):
        need_broker()
        broker = PrivateBroker().start()
        try:
            async with lockbroker.AsyncClient(broker.url) as c:
                fences = []
                async for term in c.election(unique("aio-again")).campaigns("me", ttl_ms=1000):
                    fences.append(term.fence)
                    if len(fences) == 1:
                        broker.kill()
                        await term.wait_lost()
                        broker.start()
                        continue
                    await term.release()
                    break
                self.assertEqual(len(fences), 2)
                self.assertGreater(fences[1], fences[0])
        finally:
            broker.stop()
