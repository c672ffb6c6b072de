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

#endif
