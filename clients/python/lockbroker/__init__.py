"""lockbroker: the Python client of lockbrokerd (distributed locks in Redis).

Standard library only. Two clients with one behaviour:

- :class:`Client`, for threads: ``with client.lock("name") as lease: ...``
- :class:`AsyncClient`, for asyncio: ``async with client.lock("name") as lease: ...``

A lease exposes its ``fence`` and a lost state that cannot be missed: once
the broker reports the lease lost (or the session drops), ``lease.lost`` is
set, ``on_lost`` callbacks run, the next call on the lease raises
:class:`LeaseLost`, and leaving its ``with`` raises it too. Each thread and
each asyncio task is its own reentrancy owner, so threads sharing a client
exclude each other like separate processes do. Every protocol error code
has its exception class, all under :class:`LockbrokerError`.

See README.md beside this package for the API reference.
"""

from ._core import __version__, current_owner
from ._wire import default_url
from .aio import AsyncClient, AsyncElection, AsyncLease
from .client import CancelToken, Client, Election, Lease, Leader, Watch
from .errors import (
    BadJson,
    BadRequest,
    Cancelled,
    Conflict,
    Disconnected,
    InternalError,
    InvalidArgument,
    LeaseLost,
    LimitExceeded,
    LineTooLong,
    LockbrokerError,
    LockTimeout,
    NotHeld,
    ShuttingDown,
    Unauthorized,
    Unavailable,
    UnknownOp,
    UpgradeUnsupported,
    error_for,
)
from .info import Holder, LeaseInfo, LockInfo

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "Lease",
    "AsyncLease",
    "AsyncElection",
    "CancelToken",
    "Election",
    "Leader",
    "Watch",
    "LockInfo",
    "Holder",
    "LeaseInfo",
    "current_owner",
    "default_url",
    "error_for",
    "LockbrokerError",
    "BadJson",
    "BadRequest",
    "LineTooLong",
    "UnknownOp",
    "InvalidArgument",
    "Unauthorized",
    "LockTimeout",
    "Cancelled",
    "NotHeld",
    "Conflict",
    "UpgradeUnsupported",
    "LimitExceeded",
    "Unavailable",
    "ShuttingDown",
    "InternalError",
    "Disconnected",
    "LeaseLost",
]
