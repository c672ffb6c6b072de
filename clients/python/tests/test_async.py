"""The asyncio client against the suite's broker: ``async with``, tasks
sharing a client, task cancellation while waiting, timeouts, shared mode,
semaphores, a lease lost while the body runs, errors, auth and unix."""

import asyncio
import os
import unittest

import lockbroker
from tests.support import Resp, need_broker, unique


class AsyncLockTests(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        need_broker()
        self.client = lockbroker.AsyncClient(label="py-async-tests")
        self.other = lockbroker.AsyncClient()

    async def asyncTearDown(self):
        await self.client.close()
        await self.other.close()

    async def waiters(self, name, want, timeout=3.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while (await self.client.inspect(name)).waiters != want:
            if asyncio.get_running_loop().time() > deadline:
                self.fail(f"waiters never became {want}")
            await asyncio.sleep(0.01)

    async def test_scoped_acquire_release(self):
        name = unique("async-scoped")
        async with self.client.lock(name, ttl_ms=5000, wait_ms=0) as lease:
            self.assertIsInstance(lease, lockbroker.AsyncLease)
            info = await self.client.inspect(name)
            self.assertEqual((info.state, info.fence), ("exclusive", lease.fence))
            self.assertEqual(info.holders[0].owner, lockbroker.current_owner())
            self.assertEqual(info.holders[0].client, "py-async-tests")  # hello's label
            self.assertEqual(await lease.extend(4000), 4000)
            self.assertEqual([i.lock for i in await self.client.leases()], [name])
        self.assertTrue(lease.released)
        self.assertEqual((await self.client.inspect(name)).state, "free")
        self.assertEqual((await self.client.ping())["redis"], "up")
        self.assertIn("sessions", await self.client.stats())

    async def test_wait_times_out(self):
        name = unique("async-timeout")
        async with self.other.lock(name):
            with self.assertRaises(lockbroker.LockTimeout):
                async with self.client.lock(name, wait_ms=150):
                    self.fail("granted while held")

    async def test_tasks_sharing_a_client_exclude_each_other(self):
        name = unique("async-tasks")
        inside = []
        overlap = []
        owners = set()

        async def work():
            for _ in range(10):
                async with self.client.lock(name, wait_ms=10000) as lease:
                    owners.add((await self.client.inspect(name)).holders[0].owner)
                    inside.append(lease)
                    if len(inside) > 1:
                        overlap.append(lease.count)
                    await asyncio.sleep(0.002)
                    inside.remove(lease)

        await asyncio.gather(work(), work(), work())
        self.assertEqual(overlap, [])
        self.assertEqual(len(owners), 3)

    async def test_cancelled_task_sends_cancel(self):
        name = unique("async-cancel")
        async with self.other.lock(name):
            task = asyncio.create_task(self.client.acquire(name))
            await self.waiters(name, 1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            await self.waiters(name, 0)
        # The lock went free: our cancelled acquire was not granted behind our back.
        await asyncio.sleep(0.05)
        self.assertEqual((await self.client.inspect(name)).state, "free")
        self.assertEqual(await self.client.leases(), [])

    async def test_cancel_racing_a_grant_releases_it(self):
        name = unique("async-race")
        for _ in range(5):
            task = asyncio.create_task(self.client.acquire(name))
            await asyncio.sleep(0)  # the request is on its way, not yet answered
            task.cancel()
            try:
                lease = await task
                await lease.release()
            except asyncio.CancelledError:
                pass
        await asyncio.sleep(0.1)
        self.assertEqual(await self.client.leases(), [])
        self.assertEqual((await self.client.inspect(name)).state, "free")

    async def test_cancel_token(self):
        name = unique("async-token")
        token = lockbroker.CancelToken()
        async with self.other.lock(name):
            task = asyncio.create_task(self.client.acquire(name, cancel=token))
            await self.waiters(name, 1)
            token.set()
            with self.assertRaises(lockbroker.Cancelled):
                await task

    async def test_shared_and_semaphore(self):
        name = unique("async-shared")
        async with self.client.lock(name, mode="shared") as a, \
                self.other.lock(name, mode="shared", wait_ms=0) as b:
            self.assertEqual(len((await self.client.inspect(name)).holders), 2)
            self.assertEqual((a.mode, b.mode), ("shared", "shared"))
        sem = unique("async-sem")
        async with self.client.lock(sem, limit=1, wait_ms=0) as p:
            self.assertEqual(p.mode, "permit")
            with self.assertRaises(lockbroker.LockTimeout):
                await self.other.acquire(sem, limit=1, wait_ms=0)
            with self.assertRaises(lockbroker.Conflict):
                await self.other.acquire(sem, limit=2, wait_ms=0)

    async def test_lost_while_the_body_runs(self):
        name = unique("async-lost")
        redis = Resp()
        called = []

        async def on_lost(lease):
            called.append(lease.lost_reason)

        try:
            with self.assertRaises(lockbroker.LeaseLost) as cm:
                async with self.client.lock(name, ttl_ms=600, on_lost=on_lost) as lease:
                    redis.delete_lock(name)
                    self.assertEqual(await asyncio.wait_for(lease.wait_lost(), 3), "gone")
                    with self.assertRaises(lockbroker.LeaseLost):
                        await lease.extend(1000)
        finally:
            redis.close()
        self.assertEqual(cm.exception.reason, "gone")
        await asyncio.sleep(0.01)
        self.assertEqual(called, ["gone"])

    async def test_errors(self):
        with self.assertRaises(lockbroker.InvalidArgument):
            await self.client.acquire(unique("x"), ttl_ms=5)
        with self.assertRaises(lockbroker.UnknownOp):
            await self.client.request("frobnicate")
        with self.assertRaises(lockbroker.NotHeld):
            await self.client.release_token("0" * 32)
        name = unique("async-upgrade")
        async with self.client.lock(name, mode="shared"):
            with self.assertRaises(lockbroker.UpgradeUnsupported):
                await self.client.acquire(name, wait_ms=0)

    async def test_keepalive_keeps_an_idle_session(self):
        async with lockbroker.AsyncClient(keepalive_ms=600) as c:
            lease = await c.acquire(unique("async-keepalive"), wait_ms=0)
            broker, session = c.server["broker"], c.server["session"]
            await asyncio.sleep(1.3)
            self.assertFalse(lease.lost.is_set())
            self.assertEqual((c.server["broker"], c.server["session"]), (broker, session))
            await lease.release()

    async def test_auth_and_unix(self):
        url = os.environ.get("LOCKBROKER_AUTH_URL") or self.skipTest("no auth broker")
        async with lockbroker.AsyncClient(url, auth_file=os.environ["LOCKBROKER_AUTH_FILE"]) as c:
            async with c.lock(unique("async-auth"), wait_ms=0) as lease:
                self.assertTrue(lease.held)
        async with lockbroker.AsyncClient(url) as c:
            with self.assertRaises(lockbroker.Unauthorized):
                await c.acquire(unique("async-noauth"), wait_ms=0)
        async with lockbroker.AsyncClient(os.environ["LOCKBROKER_UNIX_URL"]) as c:
            async with c.lock(unique("async-unix"), wait_ms=0) as lease:
                self.assertTrue(lease.held)


if __name__ == "__main__":
    unittest.main()
