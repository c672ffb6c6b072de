/*
 * scripts.c - finds the embedded lock scripts by name. The table of names is
 * the one place that ties script_id_t to the files in lua/.
 */
#include "broker/store/scripts.h"

#include <string.h>

#include "broker/base/log.h"

static const char *const script_names[SCRIPT__COUNT] = {
	[SCRIPT_ACQUIRE] = "acquire",
	[SCRIPT_BATCH] = "batch",
	[SCRIPT_BATCH_SLOTS] = "batch_slots",
	[SCRIPT_CANARY] = "canary",
	[SCRIPT_EXTEND] = "extend",
	[SCRIPT_FENCE] = "fence",
	[SCRIPT_HEARTBEAT] = "heartbeat",
	[SCRIPT_INSPECT] = "inspect",
	[SCRIPT_LEASE_INDEX] = "lease_index",
	[SCRIPT_ORPHANS] = "orphans",
	[SCRIPT_PROCLAIM] = "proclaim",
	[SCRIPT_REENTER] = "reenter",
	[SCRIPT_RELEASE] = "release",
	[SCRIPT_VERIFY] = "verify",
	[SCRIPT_WITHDRAW] = "withdraw",
};

static const struct script_src *by_id[SCRIPT__COUNT];

void scripts_init(void)
{
	for (int id = 0; id < SCRIPT__COUNT; id++) {
		for (size_t k = 0; k < script_source_count; k++) {
			if (strcmp(script_sources[k].name, script_names[id]) == 0)
				by_id[id] = &script_sources[k];
		}
		REQUIRE(by_id[id] != NULL);
	}
}

const struct script_src *script_get(script_id_t id)
{
	REQUIRE(id >= 0 && id < SCRIPT__COUNT && by_id[id]);
	return by_id[id];
}
