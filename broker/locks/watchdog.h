/*
 * watchdog.h - renewal of watchdog leases and expiry checks of the others.
 *
 * Each lease's tick entry is, for a watchdog lease, its next renewal (every
 * ttl/3 after the last successful one was sent) and otherwise its expiry. A
 * tick that finds now >= expires_at reports the lease lost: "expired"
 * without watchdog, "redis_unavailable" with it (renewals kept failing).
 * Renewals due in the same loop turn go out pipelined.
 */
#ifndef LB_BROKER_WATCHDOG_H
#define LB_BROKER_WATCHDOG_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/base/timers.h"

struct lease;

/* Starts the timers of a new lease l, granted with ttl_granted and
 * hold_ms of max hold left (0: none) by a script sent at sent_at. */
void watchdog_start(struct lease *l, uint64_t sent_at, int64_t ttl_granted, int64_t hold_ms);
/* Redis confirmed ms_left of lifetime, and hold_ms of max hold left (0:
 * none), for a command sent at sent_at. A confirmation older than one
 * already applied can only shorten the lease: replies of two connections
 * may arrive out of order, and either may be the one Redis ran last. */
void watchdog_confirmed(struct lease *l, uint64_t sent_at, int64_t ms_left, int64_t hold_ms);
/* (Re)schedules the lease's tick after a confirmation sent at sent_at. */
void watchdog_schedule(struct lease *l, uint64_t sent_at);
/* Redis may have lost data: asks it about every lease of every session at
 * once, pipelined (lua/verify.lua, which replays the count changes Redis
 * missed: see there); a lease it no longer holds is reported lost
 * ("gone") and dropped. gated: the store serves nothing else until done
 * (after a failover or a restart): verifies are resent on lost
 * connections, and a lease not vouched for within VERIFY_DEADLINE_MS is
 * lost ("redis_unavailable"); failover: such losses are counted as lost
 * to a failover (implies gated). done (NULL: none) runs once every
 * answer of this pass is in (at once when there is no lease). A pass
 * started while one is under way supersedes it: the newer one is gated
 * (a failover pass) if either is, and runs the older one's done when it
 * has none of its own. */
void watchdog_verify_all(bool gated, bool failover, void (*done)(void));
/* The timer callbacks of a lease's entries. */
void watchdog_on_tick(timer_ent_t *t);
void watchdog_on_max_hold(timer_ent_t *t);

#endif
