/*
 * test_coord.c - coordination beyond the mutex in the C client (issue
 * 27): lbc_watch and its LBC_EVENT_CHANGED events through lbc_poll, a
 * watch that goes on across a broker restart, lbc_unwatch; leader
 * election (lbc_campaign, lbc_proclaim, lbc_leader, lbc_observe,
 * lbc_resign), a campaign that waits through a broker restart and one
 * whose leadership is lost by it, reported, then won again; lbc_lock_all
 * (all or nothing, overlapping sets in opposite orders, what a timeout
 * gives back, bad input); against a fake broker: a re-watch's answer and
 * the change behind it keep their order, a re-watch that fails does not
 * spin, a loss is reported before watching again.
 */
#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a recorder of changes ----------------------------------------------------------- */

typedef struct changes {
	pthread_mutex_t mu;
	int n, disconnected;
	int64_t last_fence, max_fence_seen;
	bool fence_went_down;
	char last_state[16];
	char last_watch[24];
	lbc_leader_t leader; /* lbc_leader_of the last change */
} changes_t;

static void on_change(void *arg, const lbc_event_t *ev)
{
	changes_t *ch = arg;

	pthread_mutex_lock(&ch->mu);
	if (ev->type == LBC_EVENT_CHANGED) {
		cr_assert_not_null(ev->info, "a changed event without its state: %s", ev->line);
		cr_assert_not_null(ev->watch);
		ch->n++;
		snprintf(ch->last_state, sizeof(ch->last_state), "%s", ev->info->state);
		snprintf(ch->last_watch, sizeof(ch->last_watch), "%s", ev->watch);
		if (ev->info->has_fence) {
			if (ev->info->fence < ch->max_fence_seen)
				ch->fence_went_down = true;
			if (ev->info->fence > ch->max_fence_seen)
				ch->max_fence_seen = ev->info->fence;
			ch->last_fence = ev->info->fence;
		}
		(void)lbc_leader_of(ev->info, &ch->leader);
	} else if (ev->type == LBC_EVENT_DISCONNECTED) {
		ch->disconnected++;
	}
	pthread_mutex_unlock(&ch->mu);
}

static changes_t changes_get(changes_t *ch)
{
	changes_t copy;

	pthread_mutex_lock(&ch->mu);
	copy = *ch;
	pthread_mutex_unlock(&ch->mu);
	return copy;
}

/* Polls c until the last change shows state (and, if value, that leader
 * value) or timeout_ms passed; returns whether it did. */
static bool poll_until(lbc_client_t *c, changes_t *ch, const char *state, const char *value,
                       int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;

	for (;;) {
		changes_t s = changes_get(ch);
		if (strcmp(s.last_state, state) == 0 &&
		    (value == NULL || (s.leader.has_value && strcmp(s.leader.value, value) == 0)))
			return true;
		if (now_ms() >= end)
			return false;
		(void)lbc_poll(c, 100, NULL);
	}
}

/* ---- watch --------------------------------------------------------------------------- */

/* A watcher gets the state, then a change per grant, proclaim and
 * release through lbc_poll, fences never going down; lbc_unwatch ends it
 * (nothing after it), a second unwatch is LBC_NOT_HELD. */
Test(coord, watch_changes_and_unwatch, .timeout = 20)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	lbc_options_t wo = {.on_event = on_change, .event_arg = &ch};
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL), *w = must_connect(NEED_BROKER(), &wo);
	char name[96], *id = NULL;
	lbc_lock_info_t *state = NULL;
	lbc_error_t err;
	int64_t fence = 0;

	unique_name(name, sizeof(name), "watched");
	cr_assert_eq(lbc_watch(w, name, &state, &id, &err), LBC_OK, "%s", err.message);
	cr_assert_str_eq(state->state, "free");
	cr_assert_str_eq(state->lock, name);
	cr_assert_not_null(id);
	lbc_lock_info_free(state);
	lbc_lease_t *l = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT, .value = "v1"});
	cr_assert(poll_until(w, &ch, "exclusive", "v1", 5000), "the grant never came as a change");
	cr_assert_str_eq(changes_get(&ch).last_watch, id);
	cr_assert_eq(lbc_proclaim(c, l, "v2", &fence, &err), LBC_OK, "%s", err.message);
	cr_assert_eq(fence, lbc_lease_fence(l));
	cr_assert(poll_until(w, &ch, "exclusive", "v2", 5000), "the proclaim never came as a change");
	changes_t s = changes_get(&ch);
	cr_assert_eq(s.leader.term, lbc_lease_fence(l), "the term is the fence");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	cr_assert(poll_until(w, &ch, "free", NULL, 5000), "the release never came as a change");
	cr_assert_not(changes_get(&ch).fence_went_down);

	cr_assert_eq(lbc_unwatch(w, id, &err), LBC_OK, "%s", err.message);
	cr_assert_eq(lbc_unwatch(w, id, &err), LBC_NOT_HELD);
	int before = changes_get(&ch).n;
	l = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	for (int k = 0; k < 5; k++)
		(void)lbc_poll(w, 100, NULL);
	cr_assert_eq(changes_get(&ch).n, before, "a change after lbc_unwatch");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);

	/* bad input */
	cr_assert_eq(lbc_watch(w, "", NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_watch(NULL, name, NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_unwatch(w, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_unwatch(w, "w999", &err), LBC_NOT_HELD);
	free(id);
	lbc_close(c);
	lbc_close(w);
}

/* A watch goes on across a broker restart: the watcher hears the
 * disconnection, lbc_poll opens a new session and watches again (one
 * change with the state read afresh), and a change made meanwhile through
 * another broker, then one made after, both reach it. */
Test(coord, a_watch_goes_on_across_a_broker_restart, .timeout = 40, .fini = brokers_stop_all)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	lbc_options_t wo = {.on_event = on_change, .event_arg = &ch, .connect_timeout_ms = 500};
	broker_t b;
	char name[96], *id = NULL;
	lbc_error_t err;

	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL), *w = must_connect(b.url, &wo);
	unique_name(name, sizeof(name), "rewatch");
	cr_assert_eq(lbc_watch(w, name, NULL, &id, &err), LBC_OK, "%s", err.message);

	broker_kill(&b, SIGKILL);
	for (int k = 0; k < 30 && changes_get(&ch).disconnected == 0; k++)
		(void)lbc_poll(w, 100, NULL);
	cr_assert_geq(changes_get(&ch).disconnected, 1, "the watcher never heard the broker die");
	/* while it is down: polls return (no busy loop to assert, no crash) */
	for (int k = 0; k < 3; k++)
		(void)lbc_poll(w, 100, NULL);
	lbc_lease_t *l = must_acquire(c, name, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT, .value = "while-down"});
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not restart");
	cr_assert(poll_until(w, &ch, "exclusive", "while-down", 10000),
	          "after the restart the watch did not show the change made meanwhile (last %s)",
	          changes_get(&ch).last_state);
	cr_assert_str_eq(changes_get(&ch).last_watch, id, "the watch keeps its id");
	cr_assert_eq(lbc_proclaim(c, l, "after", NULL, &err), LBC_OK, "%s", err.message);
	cr_assert(poll_until(w, &ch, "exclusive", "after", 5000), "a change after the restart was not heard");
	cr_assert_eq(lbc_release(c, l, NULL, NULL), LBC_OK);
	cr_assert(poll_until(w, &ch, "free", NULL, 5000));
	cr_assert_not(changes_get(&ch).fence_went_down);
	cr_assert_eq(lbc_unwatch(w, id, &err), LBC_OK);
	free(id);
	lbc_close(w);
	lbc_close(c);
	broker_free(&b);
}

/* ---- election ------------------------------------------------------------------------------ */

typedef struct campaign_job {
	lbc_client_t *c;
	const char *name, *value;
	lbc_acquire_opts_t opts;
	lbc_lease_t *term;
	lbc_status st;
	lbc_error_t err;
} campaign_job_t;

static void *campaign_main(void *arg)
{
	campaign_job_t *j = arg;

	j->st = lbc_campaign(j->c, j->name, j->value, &j->opts, &j->term, &j->err);
	return NULL;
}

/* Two candidates: the first leads (lbc_leader shows its value and term),
 * the second waits; an observer sees each leader; a proclaim changes the
 * value in the same term; the first resigns and the second leads in a
 * higher term. */
Test(coord, campaign_leader_observe_resign, .timeout = 30)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	lbc_options_t oo = {.on_event = on_change, .event_arg = &ch};
	lbc_client_t *a = must_connect(NEED_BROKER(), NULL), *b = must_connect(NEED_BROKER(), NULL);
	lbc_client_t *obs = must_connect(NEED_BROKER(), &oo);
	char name[96], *id = NULL;
	lbc_leader_t who, now;
	lbc_lease_t *ta;
	lbc_error_t err;
	pthread_t t;

	unique_name(name, sizeof(name), "election");
	cr_assert_eq(lbc_leader(a, name, &who, &err), LBC_OK, "%s", err.message);
	cr_assert_not(who.leading, "nobody leads a new election");
	cr_assert_eq(lbc_observe(obs, name, &now, &id, &err), LBC_OK, "%s", err.message);
	cr_assert_not(now.leading);

	cr_assert_eq(lbc_campaign(a, name, "a:8080", NULL, &ta, &err), LBC_OK, "%s", err.message);
	cr_assert_eq(lbc_leader(b, name, &who, &err), LBC_OK);
	cr_assert(who.leading);
	cr_assert(who.has_value);
	cr_assert_str_eq(who.value, "a:8080");
	cr_assert_eq(who.term, lbc_lease_fence(ta));
	cr_assert(strstr(who.client, "lockbroker-c/") != NULL, "%s", who.client);
	cr_assert(poll_until(obs, &ch, "exclusive", "a:8080", 5000), "the observer never saw a lead");

	campaign_job_t j = {.c = b, .name = name, .value = "b:8080"};
	pthread_create(&t, NULL, campaign_main, &j);
	cr_assert_eq(wait_for_waiters(a, name, 1, 5000), 1, "the second candidate never waited");
	cr_assert_eq(lbc_proclaim(a, ta, "a:9090", NULL, &err), LBC_OK);
	cr_assert(poll_until(obs, &ch, "exclusive", "a:9090", 5000));
	cr_assert_eq(changes_get(&ch).leader.term, lbc_lease_fence(ta), "a proclaim keeps the term");

	int64_t first_term = lbc_lease_fence(ta);
	cr_assert_eq(lbc_resign(a, ta, &err), LBC_OK, "%s", err.message);
	pthread_join(t, NULL);
	cr_assert_eq(j.st, LBC_OK, "%s", j.err.message);
	cr_assert_gt(lbc_lease_fence(j.term), first_term, "a new term is a higher fence");
	cr_assert(poll_until(obs, &ch, "exclusive", "b:8080", 5000), "the observer never saw the new leader");
	cr_assert_eq(changes_get(&ch).leader.term, lbc_lease_fence(j.term));
	cr_assert_not(changes_get(&ch).fence_went_down);
	cr_assert_eq(lbc_resign(b, j.term, &err), LBC_OK);
	cr_assert(poll_until(obs, &ch, "free", NULL, 5000));
	cr_assert_not(changes_get(&ch).leader.leading);
	cr_assert_eq(lbc_unwatch(obs, id, &err), LBC_OK);
	free(id);
	lbc_close(a);
	lbc_close(b);
	lbc_close(obs);
}

/* The campaign's bad inputs and its ends: an election is exclusive, a
 * value over 4096 bytes is refused, wait_ms answers LBC_TIMEOUT, a try
 * (LBC_NO_WAIT) LBC_TIMEOUT at once, a cancel LBC_CANCELLED. */
Test(coord, campaign_errors, .timeout = 20)
{
	lbc_client_t *a = must_connect(NEED_BROKER(), NULL), *b = must_connect(NEED_BROKER(), NULL);
	char name[96], big[LBC_VALUE_MAX + 2];
	lbc_lease_t *ta, *tb;
	lbc_error_t err;

	unique_name(name, sizeof(name), "election-err");
	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(lbc_campaign(a, name, "x", &(lbc_acquire_opts_t){.mode = LBC_SHARED}, &ta, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_campaign(a, name, "x", &(lbc_acquire_opts_t){.limit = 2}, &ta, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_campaign(a, name, big, NULL, &ta, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_campaign(a, name, "x", NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_campaign(NULL, name, "x", NULL, &ta, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_campaign(a, "", "x", NULL, &ta, &err), LBC_INVALID_ARGUMENT);
	cr_assert_null(ta);

	cr_assert_eq(lbc_campaign(a, name, "a", NULL, &ta, &err), LBC_OK, "%s", err.message);
	cr_assert_eq(lbc_campaign(b, name, "b", &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT}, &tb, &err),
	             LBC_TIMEOUT);
	int64_t t0 = now_ms();
	cr_assert_eq(lbc_campaign(b, name, "b", &(lbc_acquire_opts_t){.wait_ms = 300}, &tb, &err), LBC_TIMEOUT);
	cr_assert_geq(now_ms() - t0, 250);
	lbc_cancel_t *cancel = lbc_cancel_new();
	lbc_cancel_fire(cancel);
	cr_assert_eq(lbc_campaign(b, name, "b", &(lbc_acquire_opts_t){.cancel = cancel}, &tb, &err),
	             LBC_CANCELLED);
	lbc_cancel_free(cancel);
	lbc_leader_t who;
	cr_assert_eq(lbc_leader(b, name, &who, &err), LBC_OK);
	cr_assert_str_eq(who.value, "a", "the losers changed nothing");
	cr_assert_eq(lbc_resign(a, ta, &err), LBC_OK);
	cr_assert_eq(lbc_leader(a, "", &who, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_leader(a, name, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_not(lbc_leader_of(NULL, &who));
	lbc_close(a);
	lbc_close(b);
}

/* A campaign waits through a broker restart (its candidate's broker is
 * killed while another candidate leads: the campaign reconnects and
 * waits again, and leads once the leader resigns); then its own broker
 * restarts under the leader: leadership is reported lost (lbc_poll > 0,
 * the term's lease lost) and the next lbc_campaign leads again in a
 * higher term. */
Test(coord, a_campaign_goes_on_across_broker_restarts, .timeout = 60, .fini = brokers_stop_all)
{
	broker_t b;
	char name[96];
	lbc_lease_t *ta;
	lbc_error_t err;
	pthread_t t;

	broker_init(&b, 0, NULL, NULL);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not start");
	lbc_client_t *a = must_connect(NEED_BROKER(), NULL);
	lbc_client_t *cand = must_connect(b.url, &(lbc_options_t){.connect_timeout_ms = 500});
	unique_name(name, sizeof(name), "election-restart");
	cr_assert_eq(lbc_campaign(a, name, "a", NULL, &ta, &err), LBC_OK, "%s", err.message);

	/* a short TTL: its broker's death frees the lock in Redis soon */
	campaign_job_t j = {.c = cand, .name = name, .value = "cand", .opts = {.ttl_ms = 2000}};
	pthread_create(&t, NULL, campaign_main, &j);
	cr_assert_eq(wait_for_waiters(a, name, 1, 5000), 1, "the candidate never waited");
	broker_kill(&b, SIGKILL);
	sleep_ms(700); /* the campaign finds no broker for a while */
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not restart");
	cr_assert_eq(wait_for_waiters(a, name, 1, 10000), 1, "the campaign did not wait again after the restart");
	int64_t first = lbc_lease_fence(ta);
	cr_assert_eq(lbc_resign(a, ta, &err), LBC_OK);
	pthread_join(t, NULL);
	cr_assert_eq(j.st, LBC_OK, "the campaign through a restart: %s", j.err.message);
	cr_assert_gt(lbc_lease_fence(j.term), first);
	lbc_leader_t who;
	cr_assert_eq(lbc_leader(a, name, &who, &err), LBC_OK);
	cr_assert_str_eq(who.value, "cand");

	/* leading, its broker restarts: lost, reported, then won again */
	broker_kill(&b, SIGKILL);
	int lost = 0;
	for (int k = 0; k < 50 && lost == 0; k++)
		lost = lbc_poll(cand, 100, NULL);
	cr_assert_eq(lost, 1, "the leadership's loss was not reported");
	cr_assert(lbc_lease_lost(j.term));
	int64_t second = lbc_lease_fence(j.term);
	cr_assert_eq(lbc_resign(cand, j.term, &err), LBC_LOST);
	cr_assert_eq(broker_start(&b, true), 0, "private broker did not restart");
	lbc_lease_t *again;
	cr_assert_eq(lbc_campaign(cand, name, "cand", &(lbc_acquire_opts_t){.wait_ms = 20000}, &again, &err),
	             LBC_OK, "%s", err.message);
	cr_assert_gt(lbc_lease_fence(again), second, "a new term after the loss");
	cr_assert_eq(lbc_resign(cand, again, &err), LBC_OK);
	lbc_close(cand);
	lbc_close(a);
	broker_free(&b);
}

/* ---- lock_all --------------------------------------------------------------------------------- */

/* All three kinds at once, each an ordinary lease afterwards (released one
 * by one); a set with one busy lock times out and leaves the others free;
 * bad input is refused (locally, or by the broker for a repeated name). */
Test(coord, lock_all_takes_all_or_nothing, .timeout = 20)
{
	lbc_client_t *c = must_connect(NEED_BROKER(), NULL), *o = must_connect(NEED_BROKER(), NULL);
	char n0[96], n1[96], n2[96];
	lbc_lease_t *out[3], *busy;
	lbc_lock_info_t *info;
	lbc_error_t err;

	unique_name(n0, sizeof(n0), "all-x");
	unique_name(n1, sizeof(n1), "all-s");
	unique_name(n2, sizeof(n2), "all-p");
	lbc_lock_spec_t set[3] = {{.name = n0}, {.name = n1, .mode = LBC_SHARED}, {.name = n2, .limit = 2}};
	cr_assert_eq(lbc_lock_all(c, set, 3, &(lbc_acquire_opts_t){.wait_ms = 2000}, out, &err), LBC_OK,
	             "%s", err.message);
	cr_assert_str_eq(lbc_lease_name(out[0]), n0);
	cr_assert_str_eq(lbc_lease_mode(out[0]), "exclusive");
	cr_assert_str_eq(lbc_lease_name(out[1]), n1);
	cr_assert_str_eq(lbc_lease_mode(out[1]), "shared");
	cr_assert_str_eq(lbc_lease_name(out[2]), n2);
	cr_assert_str_eq(lbc_lease_mode(out[2]), "permit");
	for (int i = 0; i < 3; i++)
		cr_assert_gt(lbc_lease_fence(out[i]), 0);
	for (int i = 0; i < 3; i++) {
		int64_t left = -1;
		cr_assert_eq(lbc_release(c, out[i], &left, &err), LBC_OK, "%s", err.message);
		cr_assert_eq(left, 0);
	}

	busy = must_acquire(o, n1, &(lbc_acquire_opts_t){.wait_ms = LBC_NO_WAIT});
	int64_t t0 = now_ms();
	cr_assert_eq(lbc_lock_all(c, (lbc_lock_spec_t[]){{.name = n0}, {.name = n1}, {.name = n2}}, 3,
	                          &(lbc_acquire_opts_t){.wait_ms = 400}, out, &err),
	             LBC_TIMEOUT, "%s", err.message);
	cr_assert_geq(now_ms() - t0, 300);
	for (int i = 0; i < 3; i++)
		cr_assert_null(out[i]);
	cr_assert_eq(lbc_inspect(o, n0, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "free", "a timed-out lock_all left %s held", n0);
	lbc_lock_info_free(info);
	cr_assert_eq(lbc_inspect(o, n2, &info, NULL), LBC_OK);
	cr_assert_str_eq(info->state, "free", "a timed-out lock_all left %s held", n2);
	lbc_lock_info_free(info);
	lbc_lease_info_t *ls;
	size_t nls;
	cr_assert_eq(lbc_leases(c, &ls, &nls, NULL), LBC_OK);
	cr_assert_eq(nls, 0, "the session holds nothing after a timeout");
	lbc_leases_free(ls, nls);
	cr_assert_eq(lbc_release(o, busy, NULL, NULL), LBC_OK);

	/* bad input */
	lbc_lock_spec_t many[LBC_LOCK_ALL_MAX + 1];
	for (int i = 0; i <= LBC_LOCK_ALL_MAX; i++)
		many[i] = (lbc_lock_spec_t){.name = n0};
	cr_assert_eq(lbc_lock_all(c, many, 0, NULL, out, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, many, LBC_LOCK_ALL_MAX + 1, NULL, out, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, NULL, 1, NULL, out, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, set, 1, NULL, NULL, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(NULL, set, 1, NULL, out, &err), LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, set, 1, &(lbc_acquire_opts_t){.value = "v"}, out, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, (lbc_lock_spec_t[]){{.name = ""}}, 1, NULL, out, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, (lbc_lock_spec_t[]){{.name = n0, .mode = LBC_SHARED, .limit = 2}}, 1,
	                          NULL, out, &err),
	             LBC_INVALID_ARGUMENT);
	cr_assert_eq(lbc_lock_all(c, many, 2, NULL, out, &err), LBC_INVALID_ARGUMENT,
	             "a repeated name: %s", err.message);
	cr_assert(err.from_broker, "the broker refuses a repeated name");
	lbc_close(c);
	lbc_close(o);
}

typedef struct all_job {
	const char *url;
	const char *a, *b;
	int rounds, granted;
	lbc_status bad;
	char why[256];
} all_job_t;

static void *all_main(void *arg)
{
	all_job_t *j = arg;
	lbc_client_t *c = lbc_connect(j->url, NULL, NULL);

	if (c == NULL) {
		j->bad = LBC_DISCONNECTED;
		return NULL;
	}
	for (int r = 0; r < j->rounds; r++) {
		lbc_lease_t *out[2];
		lbc_error_t err;
		lbc_status st = lbc_lock_all(c, (lbc_lock_spec_t[]){{.name = j->a}, {.name = j->b}}, 2,
		                             &(lbc_acquire_opts_t){.wait_ms = 10000}, out, &err);
		if (st != LBC_OK) {
			j->bad = st;
			snprintf(j->why, sizeof(j->why), "%s", err.message);
			break;
		}
		j->granted++;
		(void)lbc_release(c, out[1], NULL, NULL);
		(void)lbc_release(c, out[0], NULL, NULL);
	}
	lbc_close(c);
	return NULL;
}

/* Two threads take the same two locks in opposite orders, over and over:
 * neither ever waits out its wait_ms (no deadlock). */
Test(coord, lock_all_in_opposite_orders_never_deadlocks, .timeout = 60)
{
	char a[96], b[96];
	pthread_t t[2];

	unique_name(a, sizeof(a), "all-ab");
	unique_name(b, sizeof(b), "all-ba");
	all_job_t j[2] = {{.url = NEED_BROKER(), .a = a, .b = b, .rounds = 50},
	                  {.url = NEED_BROKER(), .a = b, .b = a, .rounds = 50}};
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, all_main, &j[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(j[i].bad, LBC_OK, "thread %d: %s (%s)", i, lbc_status_code(j[i].bad), j[i].why);
		cr_assert_eq(j[i].granted, 50);
	}
}

/* ---- against a fake broker ------------------------------------------------------------------ */

/* A fake broker in a thread: it accepts for ever and numbers its
 * connections from 1. Each says hello (max_line: hello_max_line, else
 * 4096; a connection past frozen_after gets no answer to anything), grants
 * any acquire, closes on op "drop", and answers a watch with fence k (the
 * connection's number) and value "old", followed in the same write, from
 * the second connection on, by a change to fence k + 10 and value "new":
 * a re-watch's answer with a change right behind it. */
typedef struct wfake {
	int lfd, port;
	pthread_t t;
	pthread_mutex_t mu;
	int conns;
	int hello_max_line; /* from the second connection on; 0: 4096 */
	int frozen_after;   /* 0: none */
} wfake_t;

static void wf_serve(wfake_t *f, int fd, int k)
{
	char line[4096], out[2048];
	int max_line;

	pthread_mutex_lock(&f->mu);
	max_line = k > 1 && f->hello_max_line ? f->hello_max_line : 4096;
	bool frozen = f->frozen_after && k > f->frozen_after;
	pthread_mutex_unlock(&f->mu);
	while (fake_read_line(fd, line, sizeof(line)) == 0) {
		long id = fake_request_id(line);
		if (frozen)
			continue;
		if (strstr(line, "\"op\":\"hello\""))
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"server\":\"fake/1\",\"proto\":1,\"session\":\"s%d\","
			         "\"broker\":\"fk\",\"limits\":{\"max_line\":%d}}\n",
			         id, k, max_line);
		else if (strstr(line, "\"op\":\"drop\""))
			return;
		else if (strstr(line, "\"op\":\"acquire\""))
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"lease\":\"t%d\",\"lock\":\"held\",\"mode\":\"exclusive\","
			         "\"fence\":%d,\"ttl_ms\":30000,\"count\":1}\n",
			         id, k, k);
		else if (strstr(line, "\"op\":\"watch\"") && k == 1)
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"watch\":\"w1\",\"lock\":\"x\",\"state\":\"exclusive\","
			         "\"fence\":1,\"holders\":[{\"mode\":\"exclusive\",\"ttl_ms\":1000,\"count\":1,"
			         "\"owner\":\"o\",\"client\":\"c\",\"value\":\"old\"}]}\n",
			         id);
		else if (strstr(line, "\"op\":\"watch\""))
			snprintf(out, sizeof(out),
			         "{\"id\":%ld,\"ok\":true,\"watch\":\"w1\",\"lock\":\"x\",\"state\":\"exclusive\","
			         "\"fence\":%d,\"holders\":[{\"mode\":\"exclusive\",\"ttl_ms\":1000,\"count\":1,"
			         "\"owner\":\"o\",\"client\":\"c\",\"value\":\"old\"}]}\n"
			         "{\"event\":\"changed\",\"watch\":\"w1\",\"lock\":\"x\",\"state\":\"exclusive\","
			         "\"fence\":%d,\"holders\":[{\"mode\":\"exclusive\",\"ttl_ms\":1000,\"count\":1,"
			         "\"owner\":\"o\",\"client\":\"c\",\"value\":\"new\"}]}\n",
			         id, k, k + 10);
		else
			snprintf(out, sizeof(out), "{\"id\":%ld,\"ok\":true,\"redis\":\"up\"}\n", id);
		(void)!send(fd, out, strlen(out), MSG_NOSIGNAL);
	}
}

static void *wf_main(void *arg)
{
	wfake_t *f = arg;

	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		pthread_mutex_lock(&f->mu);
		int k = ++f->conns;
		pthread_mutex_unlock(&f->mu);
		wf_serve(f, fd, k);
		close(fd);
	}
}

static void wf_start(wfake_t *f, int hello_max_line, int frozen_after)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);

	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->hello_max_line = hello_max_line;
	f->frozen_after = frozen_after;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 8), 0);
	getsockname(f->lfd, (struct sockaddr *)&sa, &len);
	f->port = ntohs(sa.sin_port);
	pthread_create(&f->t, NULL, wf_main, f);
}

static void wf_stop(wfake_t *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->t, NULL);
	close(f->lfd);
	pthread_mutex_destroy(&f->mu);
}

static lbc_client_t *wf_connect(wfake_t *f, changes_t *ch)
{
	char url[64];

	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", f->port);
	return must_connect(url, &(lbc_options_t){.on_event = on_change, .event_arg = ch,
	                                          .connect_timeout_ms = 5000, .liveness_check = LBC_OFF});
}

/* The connection drops; in an event loop of lbc_poll(c, 0) the watch is
 * watched again, and the re-watch's answer (fence 2, "old") is handed
 * over before the change right behind it (fence 12, "new"): the watcher
 * ends on the newest state, its fences never going down. */
Test(coord_fake, a_rewatch_and_the_change_behind_it_keep_their_order, .timeout = 20)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	wfake_t f;
	lbc_error_t err;
	char *id;

	wf_start(&f, 0, 0);
	lbc_client_t *c = wf_connect(&f, &ch);
	cr_assert_eq(lbc_watch(c, "x", NULL, &id, &err), LBC_OK, "%s", err.message);
	(void)lbc_request(c, "drop", NULL, NULL, NULL);
	for (int64_t end = now_ms() + 5000; changes_get(&ch).last_fence != 12 && now_ms() < end;) {
		(void)lbc_poll(c, 0, NULL);
		sleep_ms(20);
	}
	changes_t s = changes_get(&ch);
	cr_assert_eq(s.last_fence, 12, "the watch was not watched again (last fence %lld)", (long long)s.last_fence);
	cr_assert_str_eq(s.leader.value, "new");
	cr_assert_not(s.fence_went_down, "the afresh state came after a newer change");
	cr_assert_geq(s.disconnected, 1);
	free(id);
	lbc_close(c);
	wf_stop(&f);
}

/* A re-watch that cannot be sent (the new session's max_line is shorter
 * than the watch's line) is tried again later, not in a loop: lbc_poll
 * keeps its timeout. */
Test(coord_fake, a_rewatch_that_fails_does_not_spin, .timeout = 20)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	wfake_t f;
	lbc_error_t err;

	wf_start(&f, 30, 0);
	lbc_client_t *c = wf_connect(&f, &ch);
	cr_assert_eq(lbc_watch(c, "x", NULL, NULL, &err), LBC_OK, "%s", err.message);
	(void)lbc_request(c, "drop", NULL, NULL, NULL);
	for (int k = 0; k < 5; k++) {
		int64_t t0 = now_ms();
		cr_assert_geq(lbc_poll(c, 200, NULL), 0);
		cr_assert_lt(now_ms() - t0, 2000, "lbc_poll(200) took %lld ms", (long long)(now_ms() - t0));
	}
	cr_assert_eq(changes_get(&ch).n, 0, "no change can have come");
	lbc_close(c);
	wf_stop(&f);
}

/* A lease is lost with the connection while the client keeps a watch and
 * the broker then accepts but never answers: lbc_poll reports the loss at
 * once, and a later lbc_poll(100) does not wait out connect_timeout_ms. */
Test(coord_fake, a_loss_is_reported_before_watching_again, .timeout = 20)
{
	changes_t ch = {.mu = PTHREAD_MUTEX_INITIALIZER};
	wfake_t f;
	lbc_error_t err;
	lbc_lease_t *l;

	wf_start(&f, 0, 1);
	lbc_client_t *c = wf_connect(&f, &ch);
	cr_assert_eq(lbc_acquire(c, "held", NULL, &l, &err), LBC_OK, "%s", err.message);
	cr_assert_eq(lbc_watch(c, "x", NULL, NULL, &err), LBC_OK, "%s", err.message);
	(void)lbc_request(c, "drop", NULL, NULL, NULL);
	int64_t t0 = now_ms();
	int lost = 0;
	while (lost == 0 && now_ms() - t0 < 3000)
		lost = lbc_poll(c, 100, NULL);
	cr_assert_eq(lost, 1);
	cr_assert_lt(now_ms() - t0, 1500, "the loss took %lld ms to be reported", (long long)(now_ms() - t0));
	cr_assert(lbc_lease_lost(l));
	t0 = now_ms();
	cr_assert_eq(lbc_poll(c, 100, NULL), 0);
	cr_assert_lt(now_ms() - t0, 1500, "lbc_poll(100) took %lld ms against a mute broker",
	             (long long)(now_ms() - t0));
	lbc_lease_free(l);
	lbc_close(c);
	wf_stop(&f);
}
