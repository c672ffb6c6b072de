"""The public API as a type checker sees it (the package ships py.typed):
tests/packaging/python.sh runs ``mypy --strict`` on this file against the
installed package. Nothing here runs: the functions only have to check.
``assert_type`` is a no-op at run time; for mypy it pins what each call
returns."""

from __future__ import annotations

from typing import Any, assert_type

import lockbroker


def on_lost(lease: lockbroker.Lease) -> None:
    print("lost", lease.name, lease.lost_reason)


def threaded(url: str) -> None:
    with lockbroker.Client(url, connect_timeout=1.0, keepalive_ms=None) as client:
        assert_type(client.connect(), lockbroker.Client)
        with client.lock("invoice:42", ttl_ms=10000, wait_ms=5000, on_lost=on_lost) as lease:
            assert_type(lease, lockbroker.Lease)
            assert_type(lease.fence, int)
            assert_type(lease.lost_reason, str | None)
            lease.check()
            lease.on_lost(lambda lost: print(lost.token))
            assert_type(lease.extend(5000), int)
        lease = client.acquire("x", mode="shared", wait_ms=0, cancel=lockbroker.CancelToken())
        assert_type(lease.release(), int)
        info = client.inspect("x")
        assert_type(info, lockbroker.LockInfo)
        assert_type(info.holders, list[lockbroker.Holder])
        assert_type(info.leader, lockbroker.Holder | None)
        assert_type(client.leases(), list[lockbroker.LeaseInfo])
        assert_type(client.ping(), dict[str, Any])
        assert_type(client.server, dict[str, Any] | None)
        a, b = client.lock_all(["a", {"lock": "b", "mode": "shared"}], wait_ms=100)
        assert_type(a, lockbroker.Lease)
        election = client.election("scheduler")
        with election.campaign("10.0.0.7:8080") as term:
            assert_type(term.proclaim("10.0.0.7:9090"), int)
        for leader in election.observe():
            assert_type(leader, lockbroker.Leader | None)
        with client.watch("x") as watch:
            for state in watch:
                assert_type(state, lockbroker.LockInfo)
    try:
        pass
    except lockbroker.LockTimeout as e:
        assert_type(e.lock, str | None)
        assert_type(e.message, str)
    except lockbroker.LeaseLost as e:
        assert_type(e.reason, str)


async def with_asyncio(url: str) -> None:
    async with lockbroker.AsyncClient(url) as client:
        async with client.lock("invoice:42", wait_ms=5000) as lease:
            assert_type(lease, lockbroker.AsyncLease)
            assert_type(lease.fence, int)
            assert_type(await lease.extend(5000), int)
        lease = await client.acquire("x", on_lost=lambda lost: print(lost.name))
        assert_type(await lease.wait_lost(), str)
        async for state in client.watch("x"):
            assert_type(state, lockbroker.LockInfo)
        async for term in client.election("e").campaigns("v"):
            assert_type(term, lockbroker.AsyncLease)
        assert_type(await client.election("e").leader(), lockbroker.Leader | None)
        assert_type(await client.lock_all(["a", "b"]), list[lockbroker.AsyncLease])
        assert_type(lockbroker.__version__, str)
