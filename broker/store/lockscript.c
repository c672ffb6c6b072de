/*
 * lockscript.c - builder of lock script calls (see lockscript.h). The key
 * format lives here and only here: P "{" NAME "}" for the lock's header
 * and P "{" NAME "}:" suffix for the others, with '=' before a NAME that
 * starts with '}' or '=' so the hash tag is never empty and the mapping
 * stays one to one.
 */
#include "broker/store/lockscript.h"

#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"

/* The fence floor's place: rpool writes server.fence_high into it at every
 * send (store.h, STORE_FLOOR_DIGITS). */
static const char floor_zeros[STORE_FLOOR_DIGITS + 1] = "00000000000000000000";

static void push(lockscript_t *ls, const char *s, size_t len)
{
	if (ls->argc == ls->cap) {
		int cap = ls->cap * 2;
		const char **argv = xmalloc((size_t)cap * sizeof(*argv));
		size_t *lens = xmalloc((size_t)cap * sizeof(*lens));
		memcpy(argv, ls->argv, (size_t)ls->argc * sizeof(*argv));
		memcpy(lens, ls->len, (size_t)ls->argc * sizeof(*lens));
		if (ls->argv != ls->argv_inline) {
			free(ls->argv);
			free(ls->len);
		}
		ls->argv = argv;
		ls->len = lens;
		ls->cap = cap;
	}
	ls->argv[ls->argc] = s;
	ls->len[ls->argc] = len;
	ls->argc++;
}

void lockscript_begin(lockscript_t *ls, const char *lock, size_t lock_len, int nkeys, bool context)
{
	/* The header (third) is the bare P{NAME}. */
	static const char suffix[LOCK_NKEYS] = {'h', 'i', 0, 'q', 'w', 'd', 's'};
	const char *prefix = server.cfg->prefix;
	size_t plen = strlen(prefix);
	bool escape = lock_len > 0 && (lock[0] == '}' || lock[0] == '=');
	char *p = ls->keys;

	REQUIRE(nkeys >= 1 && nkeys <= LOCK_NKEYS && lock_len <= 512 && plen <= 64);
	ls->lock = lock;
	ls->lock_len = lock_len;
	ls->nkeys = nkeys;
	ls->argc = 0;
	ls->cap = LOCKSCRIPT_INLINE_ARGS;
	ls->argv = ls->argv_inline;
	ls->len = ls->len_inline;
	ls->nints = 0;
	ls->retry_until = 0;
	ls->deadline = 0;
	ls->floor_arg = -1;
	ls->unwaited = false;
	for (int k = 0; k < nkeys; k++) {
		char *start = p;
		memcpy(p, prefix, plen);
		p += plen;
		*p++ = '{';
		if (escape)
			*p++ = '=';
		memcpy(p, lock, lock_len);
		p += lock_len;
		*p++ = '}';
		if (suffix[k] != 0) {
			*p++ = ':';
			*p++ = suffix[k];
		}
		push(ls, start, (size_t)(p - start));
	}
	if (context) {
		lockscript_str(ls, LB_FENCE_RETENTION_STR);
		lockscript_str(ls, server.id);
		lockscript_str(ls, prefix);
		lockscript_arg(ls, lock, lock_len);
		lockscript_int(ls, LOCK_HEARTBEAT_MS);
		ls->floor_arg = ls->argc;
		push(ls, floor_zeros, STORE_FLOOR_DIGITS); /* the store writes it */
	}
}

void lockscript_arg(lockscript_t *ls, const char *s, size_t len)
{
	push(ls, s, len);
}

void lockscript_str(lockscript_t *ls, const char *s)
{
	push(ls, s, strlen(s));
}

void lockscript_int(lockscript_t *ls, int64_t v)
{
	char *buf, *p;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	REQUIRE(ls->nints < 16);
	buf = ls->ints[ls->nints++];
	p = buf + 24; /* digits from the end: snprintf was 2% of the broker */
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	push(ls, p, (size_t)(buf + 24 - p));
}

int lockscript_send(lockscript_t *ls, script_id_t script, store_fn fn, void *priv)
{
	int rc = store_eval_lock(ls->lock, ls->lock_len, script, ls->nkeys, ls->argc, ls->argv, ls->len,
	                         fn, priv, ls->retry_until, ls->deadline, ls->floor_arg, ls->unwaited);

	if (ls->argv != ls->argv_inline) {
		free(ls->argv);
		free(ls->len);
	}
	return rc;
}
