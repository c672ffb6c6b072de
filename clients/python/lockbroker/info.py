"""Typed results of the read-only ops: ``inspect`` and ``leases``.

Each class is built from the broker's answer by ``from_wire``. Fields the
protocol defines are attributes; anything a newer broker adds stays
available in ``extra`` (the protocol lets the broker add fields, never
change them), so nothing it says is dropped. Lease tokens never appear in
``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _extra(reply: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in reply.items() if k not in known}


@dataclass(frozen=True)
class Holder:
    """One holder of a lock, as ``inspect`` shows it (never its token)."""

    mode: str
    ttl_ms: int
    count: int
    owner: str
    client: str
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    value: str | None = None  # an exclusive holder's value (an election's leader's)

    _KNOWN = ("mode", "ttl_ms", "count", "owner", "client", "value")

    @classmethod
    def from_wire(cls, h: dict[str, Any]) -> "Holder":
        return cls(h.get("mode"), h.get("ttl_ms"), h.get("count"), h.get("owner", ""),
                   h.get("client", ""), _extra(h, cls._KNOWN), h.get("value"))


@dataclass(frozen=True)
class LockInfo:
    """What ``inspect`` says about a lock name.

    ``state`` is "free", "exclusive", "shared" or "semaphore"; ``limit`` the
    semaphore's permits (else None); ``waiters`` the pending acquires on
    every broker; ``fence`` the last fencing token issued, None once Redis
    forgot it.
    """

    lock: str
    state: str
    limit: int | None
    holders: list[Holder]
    waiters: int
    fence: int | None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    delay_ms: int = 0  # "delayed": how long a lock delay still holds it back

    _KNOWN = ("id", "ok", "lock", "state", "limit", "holders", "waiters", "fence", "event",
              "watch", "delay_ms")

    @classmethod
    def from_wire(cls, r: dict[str, Any]) -> "LockInfo":
        return cls(r.get("lock"), r.get("state"), r.get("limit"),
                   [Holder.from_wire(h) for h in r.get("holders") or ()],
                   r.get("waiters", 0), r.get("fence"), _extra(r, cls._KNOWN),
                   r.get("delay_ms", 0))

    @property
    def leader(self) -> "Holder | None":
        """The exclusive holder (an election's leader), or None."""
        if self.state == "exclusive" and self.holders:
            return self.holders[0]
        return None


@dataclass(frozen=True)
class LeaseInfo:
    """One lease of this session, as ``leases`` lists it.

    ``lease`` is the token (kept out of ``repr``); ``ttl_ms`` the remaining
    lifetime as the broker last confirmed it.
    """

    lease: str = field(repr=False)
    lock: str
    mode: str
    ttl_ms: int
    count: int
    fence: int
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    _KNOWN = ("lease", "lock", "mode", "ttl_ms", "count", "fence")

    @classmethod
    def from_wire(cls, r: dict[str, Any]) -> "LeaseInfo":
        return cls(r.get("lease"), r.get("lock"), r.get("mode"), r.get("ttl_ms"),
                   r.get("count"), r.get("fence"), _extra(r, cls._KNOWN))


def strip(reply: dict[str, Any]) -> dict[str, Any]:
    """A success answer without its envelope (``id``, ``ok``)."""
    return {k: v for k, v in reply.items() if k not in ("id", "ok")}
