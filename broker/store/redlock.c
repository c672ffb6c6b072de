/*
 * redlock.c - the store's backend (backend.h) over N independent Redis
 * masters (--redlock, issue 18): every call of a lock goes to all of them
 * at once (one pool per master, rpool.c; the calls of one lock keep their
 * connection, so their order, on each master) and the N replies are
 * merged into the one reply the locks layer knows from a single Redis.
 *
 * An acquire is a Redlock round (redlock_round.c; redlock_vote.h has the
 * arithmetic):
 *   - the acquire script runs on every master with the same token;
 *   - a quorum (N/2 + 1) of grants within the validity (ttl - elapsed -
 *     drift, on the quorum-th longest grant) wins it; then the round's
 *     fence F (above every fence the granting masters issued) is written
 *     on those masters (lua/fence.lua), and only when a quorum confirmed
 *     it, still within the validity, is the grant answered: {1, F, the
 *     validity from the round's start, max-hold left};
 *   - a round that cannot win any more (too many refusals or failures, or
 *     its validity spent, or the fence not confirmed) is undone at once
 *     on every master (withdraw.lua gives a grant back), and a grant that
 *     arrives after that is undone again. It answers busy {0, retry_ms}
 *     with retry_ms when a quorum may be free, {-1, 0} when a quorum saw
 *     another kind of lock, or an error when a majority did not answer.
 * Waiters never queue in Redis: a waiting acquire goes out with wait 'r'
 * (a try that marks the lock, see lua/acquire.lua), and the release that
 * frees a marked lock publishes its name on P "redlock:wake", which this
 * backend subscribes to on every master (the locks layer then runs a new
 * round; see waitq_round.c). Fairness across brokers is best effort.
 *
 * Every other call is merged by what its reply means (redlock_merge.c):
 *   extend, verify, reenter, proclaim: held when a quorum says so, for the
 *     quorum-th longest life left less the drift (so a lease ends here
 *     before a majority could free it); not held when more than N - quorum
 *     say not; unknown (NULL) when a quorum cannot answer (proclaim,
 *     held on a quorum: {1, the highest fence they show});
 *   release, withdraw: the count left where it is held (a release is
 *     safe on any master), answered when a quorum said so, when all
 *     answered, or RL_STRAGGLER_MS after a quorum did;
 *   inspect: the holder a quorum shows, with the highest fence any shows
 *     and the value a quorum of those showing it agree on;
 *   lease_index: a pointer found on any master; written on a quorum;
 *   heartbeat, orphans: the first answer (the locks layer sends none).
 * A call is freed once every master answered (or failed): a master that
 * is down fails a call at once unless it may be resent (retry_until:
 * then it waits for the master, RL_LEG_RETRY_MS at most; its effect ends
 * by the lease's TTL there anyway). A lease op that a quorum does not
 * answer fails (an error reply: unavailable), never "no reply", which
 * would say the lease ended.
 *
 * store_up: a quorum of masters is up. A master that may have lost data
 * (a new run_id, its canary) makes every lease be checked again
 * (on_data_loss): a lease held on fewer than a quorum is lost. Nothing
 * here changes lock state but through the scripts of lua/.
 *
 * The module's files, by job: this one has the life of a call (sent to
 * every master, each master's answer recorded, freed once every master
 * answered) and the backend itself; redlock_merge.c merges the replies,
 * redlock_round.c runs an acquire's round; redlock_int.h is what they
 * share, with the module's state (redlock), defined here.
 */
#include "broker/store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/base/log.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/store/canary.h"
#include "broker/store/redis_uv.h"
#include "broker/store/redlock_int.h"
#include "broker/store/redlock_vote.h"
#include "broker/store/rpool.h"

#define RL_LEG_RETRY_MS 30000 /* a master's copy of a call is resent at most this long */
#define RL_ARGS_MAX 32

struct redlock_state redlock;

/* ---- the life of a call --------------------------------------------------- */

static void call_free(rl_call_t *c)
{
	if (c->timer_on)
		timer_cancel(&c->timer);
	for (int i = 0; i < c->n; i++)
		redis_reply_free(c->copy[i]);
	for (int k = 0; k < c->argc; k++)
		free(c->argv[k]);
	free(c->argv);
	free(c->argvlen);
	free(c->route);
	free(c);
}

static void step(rl_call_t *c, const redisReply *r, bool timed_out)
{
	if (c->answered && c->phase != PH_FENCE)
		return;
	switch (c->script) {
	case SCRIPT_ACQUIRE:
		rl_acquire_step(c, timed_out);
		break;
	case SCRIPT_EXTEND:
	case SCRIPT_VERIFY:
	case SCRIPT_REENTER:
	case SCRIPT_PROCLAIM:
		rl_merge_life(c);
		if (timed_out)
			rl_deliver_error(c, RL_NO_QUORUM);
		break;
	case SCRIPT_RELEASE:
	case SCRIPT_WITHDRAW:
		rl_merge_count(c, timed_out);
		break;

	case SCRIPT_INSPECT:
		rl_merge_inspect(c, timed_out);
		break;
	case SCRIPT_LEASE_INDEX:
		rl_merge_index(c, r, timed_out);
		break;
	default:
		if (!store_reply_failed(r))
			rl_deliver(c, r);
		else if (rl_count_state(c, LEG_PENDING) == 0 || timed_out)
			rl_deliver(c, NULL);
		break;
	}
}

static void on_timer(timer_ent_t *t)
{
	rl_call_t *c = (rl_call_t *)((char *)t - offsetof(rl_call_t, timer));

	c->timer_on = false;
	step(c, NULL, true);
	if (c->legs == 0)
		call_free(c);
}

void rl_on_leg(const redisReply *r, void *priv)
{
	rl_leg_t *leg = priv;
	rl_call_t *c = leg->c;
	int i = leg->i;

	c->legs--;
	if (rpool_replayed())
		c->replayed = true;
	if (leg->fence) {
		c->fence_pending--;
		if (!store_reply_failed(r) && r->type == REDIS_REPLY_INTEGER && r->integer == 1)
			c->fence_ok++;
	} else {
		rl_record(c, i, r);
		if (c->script == SCRIPT_INSPECT && c->st[i] == LEG_OK)
			c->copy[i] = redis_reply_copy(r);
		/* A master that answers after the release was answered 0 and
		 * still has levels gives them back (see rl_merge_count). */
		if (c->script == SCRIPT_RELEASE && c->released && !c->cleaned && c->st[i] == LEG_OK &&
		    c->nv[i] >= 1 && c->v[i][0] > 0) {
			c->cleaned = true;
			rl_undo(c);
		}
		if (c->script == SCRIPT_ACQUIRE) {
			rl_vote(c, i);
			/* A grant after the round was given up: given back again
			 * (this master may have run the acquire after the undo). */
			if (c->phase == PH_LOST &&
			    (c->vote.answer[i] == RL_GRANTED || c->unknown[i]))
				rl_undo(c);
			/* One after the round was won holds the holder's F too. */
			else if ((c->phase == PH_FENCE || c->phase == PH_WON) &&
			         c->vote.answer[i] == RL_GRANTED && c->vote.fence[i] != c->fence)
				rl_send_fence(c, i);
		}
	}
	step(c, r, false);
	if (c->legs == 0) {
		if (!c->answered)
			step(c, NULL, true);
		call_free(c);
	}
}

/* The call on every master; fn (may be NULL) gets the merged reply. */
int rl_send(const char *route, size_t route_len, script_id_t script, int nkeys, int argc,
                   const char *const *argv, const size_t *argvlen, store_fn fn, void *priv,
                   uint64_t retry_until, int floor_arg)
{
	rl_call_t *c = xcalloc(1, sizeof(*c));
	uint64_t now = timers_now();
	uint32_t rt = rpool_route(route, route_len);
	int accepted = 0;

	c->script = script;
	c->fn = fn;
	c->priv = priv;
	c->n = redlock.n;
	c->quorum = redlock.quorum;
	c->t0 = now;
	c->phase = script == SCRIPT_ACQUIRE ? PH_VOTE : PH_DONE;
	timer_init(&c->timer, on_timer);
	if (retry_until > now + RL_LEG_RETRY_MS)
		retry_until = now + RL_LEG_RETRY_MS;
	/* lease_index.lua's reads (its op follows its keys): the first answer
	 * found on any master. */
	if (script == SCRIPT_LEASE_INDEX && argc > nkeys)
		c->index_get = (argvlen[nkeys] == 3 && memcmp(argv[nkeys], "get", 3) == 0) ||
		               (argvlen[nkeys] == 3 && memcmp(argv[nkeys], "why", 3) == 0);
	if ((script == SCRIPT_ACQUIRE && argc < nkeys + 10) || argc > RL_ARGS_MAX) {
		free(c);
		return -1;
	}
	if (script == SCRIPT_ACQUIRE || script == SCRIPT_RELEASE) {
		/* Kept for the undo (withdraw.lua: the keys, the context, the
		 * token, as both have them first) and the fence write. */
		c->argc = argc;
		c->nkeys = nkeys;
		c->argv = xcalloc((size_t)argc, sizeof(*c->argv));
		c->argvlen = xcalloc((size_t)argc, sizeof(*c->argvlen));
		for (int k = 0; k < argc; k++) {
			c->argv[k] = rl_dup_bytes(argv[k], argvlen[k]);
			c->argvlen[k] = argvlen[k];
		}
		c->route = rl_dup_bytes(route, route_len);
		c->route_len = route_len;
	}
	if (script == SCRIPT_ACQUIRE) {
		int64_t ttl = strtoll(argv[nkeys + 9], NULL, 10);

		c->proposal = rl_propose(c, floor_arg);
		argv = (const char *const *)c->argv;
		floor_arg = -1; /* written here, the same for every master */
		c->seq = ++redlock.seq;
		c->tag = rl_name_tag(route, route_len);
		redlock_vote_begin(&c->vote, c->n, ttl > 0 ? ttl : 1, now);
	}
	for (int i = 0; i < c->n; i++) {
		c->leg[i] = (rl_leg_t){c, i, false};
		c->st[i] = LEG_PENDING;
		/* A master whose canary is not primed serves nothing yet. */
		if (canary_primed(redlock.canary[i]) && rpool_eval(redlock.pool[i], rt, script, nkeys, argc, argv, argvlen, rl_on_leg, &c->leg[i],
		               retry_until, RP_NO_WAIT, floor_arg) == 0) {
			accepted++;
			c->legs++;
		} else {
			c->st[i] = LEG_FAILED;
			if (script == SCRIPT_ACQUIRE)
				redlock_vote_set(&c->vote, i, RL_FAILED, 0, -1);
		}
	}
	if (accepted < c->quorum && script != SCRIPT_RELEASE && script != SCRIPT_WITHDRAW &&
	    !(script == SCRIPT_LEASE_INDEX && c->index_get)) {
		/* Cannot be had: refused now, fn will not run. What went out
		 * still runs; an acquire's grants are given back. */
		c->answered = true;
		if (script == SCRIPT_ACQUIRE && accepted > 0) {
			c->phase = PH_LOST;
			rl_undo(c);
		}
		if (c->legs == 0) {
			call_free(c);
		}
		return -1;
	}
	if (accepted == 0) {
		call_free(c);
		return -1;
	}
	if (script == SCRIPT_ACQUIRE)
		rl_arm(c, now + (uint64_t)(c->vote.want_ttl_ms - redlock_drift_ms(c->vote.want_ttl_ms)));
	return 0;
}

/* ---- the backend ------------------------------------------------------------ */

/* A release freed lock msg on master (int)priv (lua/release.lua), or a
 * watched lock changed ("\1" NAME: store_notice_channel): the locks layer
 * hears it from each master, and reads the lock once. */
static void on_wake_message(const char *msg, size_t len, void *priv)
{
	int i = (int)(intptr_t)priv;
	rl_wake_t *w;

	if (len > 0 && msg[0] == '\1') {
		redlock.E.on_wake(msg, len);
		return;
	}
	w = rl_wake_of(rl_name_tag(msg, len));

	w->wake_seq[i] = ++redlock.seq;
	if (w->lost_seq && !(w->mask & (1u << i)))
		return; /* nothing new for the last round: see rl_wake_t */
	redlock.E.on_wake(msg, len);
}

static void on_wake_subscribed(void *priv)
{
	(void)priv;
	redlock.E.on_rewatch();
}

/* Master i serves: up, and its canary primed (canary.h). */
static bool master_serves(int i)
{
	return redlock.pool[i] && rpool_up(redlock.pool[i]) && canary_primed(redlock.canary[i]);
}

static int masters_up(void)
{
	int up = 0;

	for (int i = 0; i < redlock.n; i++)
		up += master_serves(i);
	return up;
}

/* A master came up (or its canary was primed): when that makes a quorum,
 * the store is up. A canary not primed yet is checked now. */
static void on_pool_up(void)
{
	for (int i = 0; i < redlock.n; i++)
		if (redlock.pool[i] && rpool_up(redlock.pool[i]) && !canary_primed(redlock.canary[i]))
			canary_check_now(redlock.canary[i]);
	if (masters_up() == redlock.quorum)
		redlock.E.on_up();
}

static void on_pool_loss(const char *why)
{
	redlock.E.on_data_loss(why);
}

static void redlock_start(uv_loop_t *loop, const lb_config_t *cfg, const store_events_t *events)
{
	char channel[128], name[64], key[160];
	rpool_inbox_t inbox;
	rpool_callbacks_t cb;

	memset(&redlock, 0, sizeof(redlock));
	redlock.E = *events;
	redlock.n = cfg->nredlock;
	redlock.quorum = redlock_quorum(redlock.n);
	/* The channel lua/acquire.lua's 'v' mark makes a release publish on. */
	snprintf(channel, sizeof(channel), "%sredlock:wake", cfg->prefix);
	snprintf(name, sizeof(name), "lockbroker-%s", server.id);
	redlock.wakes = xcalloc(RL_WAKE_SLOTS, sizeof(*redlock.wakes));
	cb = (rpool_callbacks_t){
		.on_up = on_pool_up,
		.on_data_loss = on_pool_loss,
		.batch_max = cfg->redis_batch_max,
	};
	for (int i = 0; i < redlock.n; i++) {
		int n;
		redlock.addr[i] = &cfg->redlock[i];
		inbox = (rpool_inbox_t){channel, on_wake_message, on_wake_subscribed,
		                        (void *)(intptr_t)i};
		redlock.pool[i] = rpool_new(loop, &cfg->redlock[i], cfg->pool, name, &cb, &inbox);
		n = snprintf(key, sizeof(key), "%sbroker:{%s}:canary", cfg->prefix, server.id);
		redlock.canary[i] = canary_start_on(i, key, (size_t)n, on_pool_loss);
		canary_on_primed(redlock.canary[i], on_pool_up);
	}
	LOG(LOG_INFO, "msg=\"redlock: %d masters, a quorum of %d\"", redlock.n, redlock.quorum);
}

static void redlock_close(void)
{
	for (int i = 0; i < redlock.n; i++) {
		canary_stop(redlock.canary[i]);
		redlock.canary[i] = NULL;
		rpool_close(redlock.pool[i]);
	}
}

static void redlock_free(void)
{
	for (int i = 0; i < redlock.n; i++) {
		rpool_free(redlock.pool[i]);
		redlock.pool[i] = NULL;
	}
	free(redlock.wakes);
	redlock.wakes = NULL;
}

static void redlock_loss_checked(void)
{
	/* A master that restarted is closed for the check (rpool.c): open. */
	for (int i = 0; i < redlock.n; i++)
		rpool_check_done(redlock.pool[i]);
}

static bool redlock_up(void)
{
	return masters_up() >= redlock.quorum;
}

static size_t redlock_pending(void)
{
	size_t n = 0;

	for (int i = 0; i < redlock.n; i++)
		n += redlock.pool[i] ? rpool_pending(redlock.pool[i]) : 0;
	return n;
}

static bool redlock_replayed(void)
{
	return redlock.delivering ? redlock.delivering_replayed : rpool_replayed();
}

static int redlock_eval(const char *route, size_t route_len, script_id_t script, int nkeys,
                        int argc, const char *const *argv, const size_t *argvlen, store_fn fn,
                        void *priv, uint64_t retry_until, uint64_t deadline, int wait,
                        int floor_arg)
{
	(void)wait; /* --redis-wait-replicas is refused with --redlock */
	(void)deadline; /* no redirects to wait through */
	return rl_send(route, route_len, script, nkeys, argc, argv, argvlen, fn, priv, retry_until,
	               floor_arg);
}

size_t redlock_inspected(int *holds, size_t max)
{
	if (!redlock.inspecting)
		return 0;
	for (int i = 0; i < redlock.n && (size_t)i < max; i++)
		holds[i] = redlock.inspected[i];
	return (size_t)redlock.n;
}

static int redlock_eval_master(int master, const char *route, size_t route_len,
                               script_id_t script, int nkeys, int argc, const char *const *argv,
                               const size_t *argvlen, store_fn fn, void *priv)
{
	if (master < 0 || master >= redlock.n)
		return -1;
	return rpool_eval(redlock.pool[master], rpool_route(route, route_len), script, nkeys, argc, argv,
	                  argvlen, fn, priv, 0, RP_NO_WAIT, -1);
}

static size_t redlock_masters(store_master_t *out, size_t max)
{
	for (int i = 0; i < redlock.n && (size_t)i < max; i++) {
		const redis_addr_t *a = redlock.addr[i];
		store_master_t *m = &out[i];

		memset(m, 0, sizeof(*m));
		if (a->kind == URL_UNIX)
			snprintf(m->addr, sizeof(m->addr), "%s", a->path);
		else
			snprintf(m->addr, sizeof(m->addr), "%s:%d", a->host, a->port);
		m->up = master_serves(i);
		m->pending = redlock.pool[i] ? rpool_pending(redlock.pool[i]) : 0;
	}
	return (size_t)redlock.n;
}

/* Waiters go in rounds: a queue on independent masters would be N
 * queues, in N orders. Shared locks and semaphores would need their
 * holders counted by a majority, which the merge of replies does not do.
 * A master that restarted empty takes a lease again when it renews. */
static const store_caps_t redlock_caps = {
	.wait = STORE_WAIT_ROUNDS,
	.exclusive_only = "Redlock mode (--redlock) serves exclusive locks only: mode \"shared\" "
	                  "and limit are not supported",
	.retake = true,
};

const store_backend_t store_redlock_backend = {
	.caps = &redlock_caps,
	.start = redlock_start,
	.close = redlock_close,
	.free = redlock_free,
	.loss_checked = redlock_loss_checked,
	.up = redlock_up,
	.pending = redlock_pending,
	.replayed = redlock_replayed,
	.eval = redlock_eval,
	.eval_master = redlock_eval_master,
	.masters = redlock_masters,
};
