"""The threaded client against the suite's broker (LOCKBROKER_URL): scoped
locks, waiting, cancel, shared mode, semaphores, threads sharing a client
(two on one lock, sixteen on locks of their own), leases lost while the
body runs, and every error code the broker can be made to answer."""

import os
import signal
import threading
import time
import unittest

import lockbroker
from tests.support import Resp, need_broker, unique, wait_until


class LockTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_broker()
        cls.client = lockbroker.Client(label="py-tests")
        cls.other = lockbroker.Client(label="py-tests-other")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.other.close()

    def test_scoped_acquire_release(self):
        name = unique("scoped")
        with self.client.lock(name, ttl_ms=5000, wait_ms=0) as lease:
            self.assertIsInstance(lease, lockbroker.Lease)
            self.assertEqual((lease.name, lease.mode, lease.count), (name, "exclusive", 1))
            self.assertIsInstance(lease.fence, int)
            self.assertTrue(lease.held)
            info = self.client.inspect(name)
            self.assertEqual(info.state, "exclusive")
            self.assertEqual(info.fence, lease.fence)
            self.assertEqual(info.holders[0].owner, lockbroker.current_owner())
            self.assertEqual(info.holders[0].client, "py-tests")
            self.assertIn(lease.token, [i.lease for i in self.client.leases()])
            self.assertNotIn(lease.token, repr(lease))
        self.assertTrue(lease.released)
        self.assertFalse(lease.lost.is_set())
        self.assertEqual(self.client.inspect(name).state, "free")
        with self.assertRaises(lockbroker.NotHeld):
            lease.release()

    def test_fences_increase(self):
        name = unique("fence")
        fences = []
        for _ in range(3):
            with self.client.lock(name, wait_ms=0) as lease:
                fences.append(lease.fence)
        self.assertEqual(fences, sorted(set(fences)))

    def test_reentrant_in_one_thread(self):
        name = unique("reenter")
        with self.client.lock(name) as outer:
            with self.client.lock(name, wait_ms=0) as inner:
                self.assertEqual(inner.token, outer.token)
                self.assertEqual(inner.count, 2)
            self.assertTrue(outer.held)
            self.assertEqual(self.client.inspect(name).holders[0].count, 1)
        self.assertEqual(self.client.inspect(name).state, "free")

    def test_release_and_extend(self):
        name = unique("extend")
        lease = self.client.acquire(name, ttl_ms=2000, wait_ms=0)
        self.assertEqual(lease.extend(5000), 5000)
        self.assertEqual(lease.ttl_ms, 5000)
        self.assertGreater(self.client.inspect(name).holders[0].ttl_ms, 3000)
        self.assertEqual(lease.release(), 0)
        with self.assertRaises(lockbroker.NotHeld):
            lease.extend(1000)

    def test_wait_times_out(self):
        name = unique("timeout")
        with self.other.lock(name):
            t0 = time.monotonic()
            with self.assertRaises(lockbroker.LockTimeout) as cm:
                with self.client.lock(name, wait_ms=200):
                    self.fail("granted while held")
            self.assertGreaterEqual(time.monotonic() - t0, 0.19)
            self.assertEqual(cm.exception.code, "timeout")
            self.assertTrue(cm.exception.message)
            # It says which lock: a program waiting on several can tell.
            self.assertEqual((cm.exception.op, cm.exception.lock), ("acquire", name))
            self.assertIn(f"(acquire {name!r})", str(cm.exception))
            with self.assertRaises(lockbroker.LockTimeout):
                self.client.acquire(name, wait_ms=0)

    def test_wait_is_granted_on_release(self):
        name = unique("handoff")
        held = self.other.acquire(name)
        got = []
        t = threading.Thread(target=lambda: got.append(self.client.acquire(name, wait_ms=5000)))
        t.start()
        self.assertTrue(wait_until(lambda: self.client.inspect(name).waiters == 1))
        held.release()
        t.join(5)
        self.assertEqual(len(got), 1)
        self.assertGreater(got[0].fence, held.fence)
        got[0].release()

    def test_cancel_token_cancels_a_waiting_acquire(self):
        name = unique("cancel")
        token = lockbroker.CancelToken()
        errs = []

        def wait():
            try:
                self.client.acquire(name, cancel=token)
            except lockbroker.LockbrokerError as e:
                errs.append(e)

        with self.other.lock(name):
            t = threading.Thread(target=wait)
            t.start()
            self.assertTrue(wait_until(lambda: self.client.inspect(name).waiters == 1))
            token.cancel()
            t.join(5)
            self.assertEqual([type(e) for e in errs], [lockbroker.Cancelled])
            self.assertEqual(self.client.inspect(name).waiters, 0)
        with self.assertRaises(lockbroker.Cancelled):
            self.client.acquire(name, cancel=token)

    def test_interrupted_wait_sends_cancel(self):
        if threading.current_thread() is not threading.main_thread():
            self.skipTest("signals reach the main thread only")
        name = unique("interrupt")
        # SIGINT may be ignored where the suite runs (a background job).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, previous)
        with self.other.lock(name):
            timer = threading.Timer(0.2, signal.pthread_kill,
                                    (threading.main_thread().ident, signal.SIGINT))
            timer.start()
            with self.assertRaises(KeyboardInterrupt):
                self.client.acquire(name, wait_ms=5000)
            timer.join()
            self.assertTrue(wait_until(lambda: self.client.inspect(name).waiters == 0))
        # Nothing of ours holds it: the cancelled acquire left no lease.
        self.assertTrue(wait_until(lambda: self.client.inspect(name).state == "free"))
        self.assertEqual([i for i in self.client.leases() if i.lock == name], [])

    def test_shared_mode(self):
        name = unique("shared")
        with self.client.lock(name, mode="shared", wait_ms=0) as a, \
                self.other.lock(name, mode="shared", wait_ms=0) as b:
            self.assertEqual((a.mode, b.mode), ("shared", "shared"))
            info = self.client.inspect(name)
            self.assertEqual((info.state, len(info.holders)), ("shared", 2))
            with self.assertRaises(lockbroker.LockTimeout):
                self.other.acquire(name, wait_ms=0, owner="writer")
        with self.client.lock(name, wait_ms=0) as w:
            self.assertEqual(w.mode, "exclusive")

    def test_semaphore(self):
        name = unique("sem")
        p1 = self.client.acquire(name, limit=2, wait_ms=0)
        p2 = self.client.acquire(name, limit=2, wait_ms=0)
        self.assertEqual((p1.mode, p2.mode), ("permit", "permit"))
        self.assertNotEqual(p1.token, p2.token)
        self.assertLess(p1.fence, p2.fence)
        info = self.client.inspect(name)
        self.assertEqual((info.state, info.limit, len(info.holders)), ("semaphore", 2, 2))
        with self.assertRaises(lockbroker.LockTimeout):
            self.other.acquire(name, limit=2, wait_ms=0)
        p1.release()
        with self.other.lock(name, limit=2, wait_ms=0) as p3:
            self.assertEqual(p3.mode, "permit")
        p2.release()

    def test_threads_sharing_a_client_exclude_each_other(self):
        name = unique("threads")
        inside = []
        overlap = []
        counter = [0]
        owners = set()

        def work():
            for _ in range(15):
                with self.client.lock(name, wait_ms=10000) as lease:
                    owners.add(self.client.inspect(name).holders[0].owner)
                    inside.append(1)
                    if len(inside) > 1:
                        overlap.append(lease.count)
                    v = counter[0]
                    time.sleep(0.002)
                    counter[0] = v + 1
                    inside.pop()

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(overlap, [])
        self.assertEqual(counter[0], 30)
        self.assertEqual(len(owners), 2)

    def test_many_threads_share_one_client(self):
        # Lines of several threads go out in one write, and the answers one
        # read brings wake their callers in turn: none may be left behind.
        client = lockbroker.Client(label="py-tests-many")
        self.addCleanup(client.close)
        prefix = unique("many")
        done = []
        errors = []

        def work(i):
            try:
                for _ in range(40):
                    with client.lock(f"{prefix}-{i}", wait_ms=0) as lease:
                        self.assertTrue(lease.held)
                done.append(i)
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        # Daemon threads and one deadline: a caller never woken fails the
        # test instead of hanging the suite.
        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(16)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.assertEqual(errors, [])
        self.assertEqual(sorted(done), list(range(16)))
        self.assertEqual(client.leases(), [])

    def test_interrupted_right_after_the_wake_neither_hangs_nor_stalls_others(self):
        # An exception (a signal handler's, in the main thread) raised just
        # after the caller's wait returned: the caller gives up, its answer
        # having been routed; it must not wait again for a wake it already
        # had, and the wake chain must go on for the others.
        from lockbroker import client as client_mod

        real_allocate = client_mod._thread.allocate_lock
        armed = threading.Event()

        class InterruptedAfterWake:
            """A waiter lock whose second acquire (the wait for the answer)
            raises once it returned, while ``armed``."""

            def __init__(self):
                self._lock = real_allocate()
                self._n = 0

            def acquire(self, *args, **kwargs):
                got = self._lock.acquire(*args, **kwargs)
                self._n += 1
                if self._n == 2 and armed.is_set():
                    armed.clear()
                    raise KeyboardInterrupt("right after the wake")
                return got

            def release(self):
                self._lock.release()

        class ThreadShim:
            LockType = InterruptedAfterWake  # the wake chain's release

            @staticmethod
            def allocate_lock():
                return InterruptedAfterWake()

        # Every waiter of this client's sessions is a shim (the session
        # takes LockType when it is made).
        real_thread = client_mod._thread
        client_mod._thread = ThreadShim
        self.addCleanup(setattr, client_mod, "_thread", real_thread)
        client = lockbroker.Client(label="py-tests-interrupted")
        self.addCleanup(client.close)
        client.ping()
        result = []

        def call():
            try:
                client.ping()
                result.append("answered")
            except KeyboardInterrupt:
                result.append("interrupted")

        armed.set()
        t = threading.Thread(target=call, daemon=True)
        t.start()
        t.join(5)
        self.assertFalse(t.is_alive(), "the interrupted caller hangs")
        self.assertEqual(result, ["interrupted"])
        # the client goes on: sixteen callers at once are all answered
        answered = []
        threads = [threading.Thread(target=lambda: answered.append(client.ping()), daemon=True)
                   for _ in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(10)
        self.assertEqual(len(answered), 16)

    def test_one_owner_when_told(self):
        name = unique("owner")
        shared = lockbroker.Client(owner="one-owner")
        try:
            a = shared.acquire(name, wait_ms=0)
            got = []
            t = threading.Thread(target=lambda: got.append(shared.acquire(name, wait_ms=0)))
            t.start()
            t.join(5)
            self.assertEqual((got[0].token, got[0].count), (a.token, 2))
            got[0].release()
            a.release()
        finally:
            shared.close()

    def test_detached_lease_outlives_its_client(self):
        name = unique("detach")
        c = lockbroker.Client()
        lease = c.acquire(name, detach=True, ttl_ms=5000, wait_ms=0)
        self.assertTrue(lease.detached)
        c.close()
        self.assertFalse(lease.lost.is_set())
        info = self.client.inspect(name)
        self.assertEqual(info.state, "exclusive")
        self.assertEqual(self.client.extend_token(lease.token, 4000), 4000)
        self.assertEqual(self.client.release_token(lease.token), 0)
        self.assertEqual(self.client.inspect(name).state, "free")

    def test_max_hold_is_a_loss(self):
        name = unique("maxhold")
        called = []
        with self.assertRaises(lockbroker.LeaseLost) as cm:
            with self.client.lock(name, max_hold_ms=300, on_lost=called.append) as lease:
                self.assertTrue(lease.lost.wait(3))
        self.assertEqual(cm.exception.reason, "max_hold")
        self.assertIs(cm.exception.lease, lease)
        self.assertTrue(wait_until(lambda: called == [lease]))

    def test_lost_while_the_body_runs(self):
        name = unique("lost")
        redis = Resp()
        called = []
        body = []
        try:
            with self.assertRaises(lockbroker.LeaseLost) as cm:
                with self.client.lock(name, ttl_ms=600, wait_ms=0,
                                      on_lost=lambda l: called.append(
                                          (l, threading.current_thread().name))) as lease:
                    fence = lease.fence
                    self.assertGreaterEqual(redis.delete_lock(name), 1)
                    # The body's view: the event fires at the next renewal...
                    self.assertTrue(lease.lost.wait(3))
                    body.append(lease.lost_reason)
                    self.assertFalse(lease.held)
                    # ...and every call on the lease raises the loss.
                    for call in (lease.check, lambda: lease.fence, lambda: lease.extend(1000)):
                        with self.assertRaises(lockbroker.LeaseLost) as inner:
                            call()
                        self.assertEqual(inner.exception.reason, "gone")
        finally:
            redis.close()
        self.assertEqual(body, ["gone"])
        self.assertEqual(cm.exception.reason, "gone")
        self.assertEqual(cm.exception.lock, name)
        self.assertTrue(wait_until(lambda: len(called) == 1))
        self.assertIs(called[0][0], lease)
        self.assertEqual(called[0][1], "lockbroker-callbacks")
        self.assertIn("lost", repr(lease))
        with self.client.lock(name, wait_ms=0) as again:
            self.assertGreater(again.fence, fence)

    def test_lease_lost_raised_in_body_is_not_doubled(self):
        name = unique("lostbody")
        redis = Resp()
        try:
            with self.assertRaises(lockbroker.LeaseLost) as cm:
                with self.client.lock(name, ttl_ms=600, wait_ms=0) as lease:
                    redis.delete_lock(name)
                    lease.lost.wait(3)
                    lease.check()
        finally:
            redis.close()
        self.assertIsNone(cm.exception.__context__)

    def test_unrenewed_lease_expires(self):
        name = unique("nowatchdog")
        lease = self.client.acquire(name, ttl_ms=400, watchdog=False, wait_ms=0)
        time.sleep(0.2)
        self.assertEqual(lease.extend(400), 400)  # extend is what keeps it alive
        self.assertTrue(lease.lost.wait(3))
        self.assertEqual(lease.lost_reason, "expired")
        with self.assertRaises(lockbroker.LeaseLost):
            lease.release()

    def test_on_lost_added_late(self):
        name = unique("late")
        lease = self.client.acquire(name, max_hold_ms=200, wait_ms=0)
        self.assertTrue(lease.lost.wait(3))
        called = []
        lease.on_lost(called.append)
        self.assertTrue(wait_until(lambda: called == [lease]))
        with self.assertRaises(lockbroker.LeaseLost):
            lease.release()

    def test_ping_stats(self):
        self.assertEqual(self.client.ping()["redis"], "up")
        stats = self.client.stats()
        for key in ("uptime_s", "sessions", "leases", "acquired_total", "redis"):
            self.assertIn(key, stats)
        self.assertEqual(self.client.server["proto"], 1)


class ErrorCodeTests(unittest.TestCase):
    """Each code the broker answers reaches the caller as its class."""

    @classmethod
    def setUpClass(cls):
        need_broker()
        cls.client = lockbroker.Client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def check(self, cls, fn, *args, **kwargs):
        with self.assertRaises(cls) as cm:
            fn(*args, **kwargs)
        e = cm.exception
        self.assertIsInstance(e, lockbroker.LockbrokerError)
        self.assertEqual(e.code, cls.code)
        self.assertTrue(e.message)
        return e

    def test_invalid_argument(self):
        e = self.check(lockbroker.InvalidArgument, self.client.acquire, unique("x"), ttl_ms=5)
        self.assertIn("ttl_ms", e.message)
        self.assertEqual(e.op, "acquire")
        self.check(lockbroker.InvalidArgument, self.client.request, "acquire",
                   lock="x", tll_ms=5)

    def test_client_side_refusals(self):
        self.check(lockbroker.InvalidArgument, self.client.request, "ping", id=7)
        with lockbroker.Client(auth_file="/nonexistent/secret") as c:
            t0 = time.monotonic()
            e = self.check(lockbroker.InvalidArgument, c.ping)
            self.assertIn("auth_file", e.message)
            self.assertLess(time.monotonic() - t0, 1)  # not retried

    def test_unknown_op_and_bad_request(self):
        self.check(lockbroker.UnknownOp, self.client.request, "frobnicate")
        self.check(lockbroker.BadRequest, self.client.request, None)

    def test_not_held(self):
        self.check(lockbroker.NotHeld, self.client.release_token, "0" * 32)
        self.check(lockbroker.NotHeld, self.client.extend_token, "0" * 32, 1000)

    def test_conflict_and_upgrade(self):
        name = unique("kind")
        with self.client.lock(name, mode="shared", wait_ms=0):
            self.check(lockbroker.Conflict, self.client.acquire, name, limit=3, wait_ms=0)
            self.check(lockbroker.UpgradeUnsupported, self.client.acquire, name, wait_ms=0)

    def test_line_too_long_is_refused_before_sending(self):
        e = self.check(lockbroker.LineTooLong, self.client.request, "ping",
                       pad="x" * 70000)
        self.assertIn("max_line", e.message)
        self.assertEqual(self.client.ping()["redis"], "up")  # the session lives on

    def test_timeout_and_cancelled(self):
        name = unique("tc")
        with self.client.lock(name):
            other = lockbroker.Client()
            try:
                self.check(lockbroker.LockTimeout, other.acquire, name, wait_ms=50)
                token = lockbroker.CancelToken()
                threading.Timer(0.1, token.cancel).start()
                self.check(lockbroker.Cancelled, other.acquire, name, cancel=token)
            finally:
                other.close()


class AuthAndUnixTests(unittest.TestCase):
    def test_auth_secret_value(self):
        url = os.environ.get("LOCKBROKER_AUTH_URL") or self.skipTest("no auth broker")
        with lockbroker.Client(url, auth=os.environ["LOCKBROKER_AUTH_SECRET"]) as c:
            with c.lock(unique("auth"), wait_ms=0) as lease:
                self.assertTrue(lease.held)

    def test_auth_secret_file(self):
        url = os.environ.get("LOCKBROKER_AUTH_URL") or self.skipTest("no auth broker")
        with lockbroker.Client(url, auth_file=os.environ["LOCKBROKER_AUTH_FILE"]) as c:
            with c.lock(unique("authf"), wait_ms=0) as lease:
                self.assertTrue(lease.held)

    def test_unauthorized(self):
        url = os.environ.get("LOCKBROKER_AUTH_URL") or self.skipTest("no auth broker")
        with lockbroker.Client(url, auth="wrong") as c:
            with self.assertRaises(lockbroker.Unauthorized):
                c.ping()
        with lockbroker.Client(url) as c:  # no secret: ping works, the rest does not
            self.assertIn("redis", c.ping())
            with self.assertRaises(lockbroker.Unauthorized) as cm:
                c.acquire(unique("noauth"), wait_ms=0)
            self.assertEqual(cm.exception.code, "unauthorized")

    def test_unix_socket(self):
        url = os.environ.get("LOCKBROKER_UNIX_URL") or self.skipTest("no unix broker")
        with lockbroker.Client(url) as c:
            name = unique("unix")
            with c.lock(name, wait_ms=0) as lease:
                self.assertEqual(c.inspect(name).fence, lease.fence)

    def test_default_url_is_lockbroker_url(self):
        need_broker()
        with lockbroker.Client() as c:
            self.assertEqual(c.url, os.environ["LOCKBROKER_URL"])
            self.assertEqual(c.ping()["redis"], "up")

    def test_keepalive_keeps_an_idle_session(self):
        need_broker()
        with lockbroker.Client(keepalive_ms=600) as c:
            lease = c.acquire(unique("keepalive"), wait_ms=0)
            session = c.server["session"]
            time.sleep(1.3)
            self.assertFalse(lease.lost.is_set())
            self.assertEqual(c.server["session"], session)
            lease.release()


if __name__ == "__main__":
    unittest.main()
