/*
 * scripts.h - the Lua scripts of lua/, embedded at build time
 * (deploy/embed-lua.sh writes build/gen/lua_scripts.c).
 */
#ifndef LB_BROKER_SCRIPTS_H
#define LB_BROKER_SCRIPTS_H

#include <stddef.h>

struct script_src {
	const char *name; /* file name without .lua */
	const char *text;
	size_t len;
};

extern const struct script_src script_sources[];
extern const size_t script_source_count;

/* The scripts the broker calls, by name; scripts_init() checks that every
 * one of them was embedded. */
typedef enum script_id {
	SCRIPT_ACQUIRE,
	SCRIPT_BATCH,
	SCRIPT_BATCH_SLOTS, /* Redis 7: loaded only where a pool batches across slots */
	SCRIPT_CANARY,
	SCRIPT_EXTEND,
	SCRIPT_FENCE,
	SCRIPT_HEARTBEAT,
	SCRIPT_INSPECT,
	SCRIPT_LEASE_INDEX,
	SCRIPT_ORPHANS,
	SCRIPT_PROCLAIM,
	SCRIPT_REENTER,
	SCRIPT_RELEASE,
	SCRIPT_VERIFY,
	SCRIPT_WITHDRAW,
	SCRIPT__COUNT
} script_id_t;

/* The embedded source of a script (its prelude included). */
const struct script_src *script_get(script_id_t id);
/* Aborts when a script is missing: a build problem, not a run-time one. */
void scripts_init(void);

#endif
