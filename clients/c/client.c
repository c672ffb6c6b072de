/*
 * client.c - one client, one connection: sessions (connect, hello,
 * teardown, reconnect with backoff), requests and their answers, events,
 * the liveness thread (the client's check that the broker is alive, and
 * the keepalive pings), lbc_poll and lbc_close.
 *
 * Threads. Any number of threads may call one client. A request is
 * registered (an lbc_pending_t on the caller's stack, in c->pending) before
 * its line is written, so its answer always finds it. There is no reader
 * thread: a thread that waits for an answer becomes the reader when nobody
 * is (c->reading), reads the socket with the lock released, then, under the
 * lock, hands every complete line to its owner (answers by id, events to
 * the leases they name). When a thread stops waiting it hands the reader
 * role to another waiting thread (signals its condition variable). So a
 * waiting acquire never blocks another thread's release, and each answer
 * wakes only the thread it belongs to.
 *
 * Locks: mu guards all state; wmu serialises writes so that lines never
 * interleave. Nobody holds mu across I/O. Lock order: wmu, then mu (only
 * the write path holds wmu, and it takes mu after releasing wmu); the
 * liveness thread only try-locks wmu under mu, which cannot block.
 *
 * Liveness. A broker that freezes with its socket open stops renewing its
 * leases, and Redis frees each lock a TTL after its last renewal (the
 * broker renews every TTL/3), while the holder hears nothing. So, while
 * the session holds a lease bound to it, a broker silent for longer than
 * bound = min(shortest TTL held / 3, keepalive_ms or LBC_LIVENESS_DEFAULT_MS)
 * ends the session (its leases lost, "disconnected") before Redis can give
 * a lock away. That must work while the program does not call the library
 * (lockctl run waits in poll(); a program works while it holds a lock), so
 * it is a thread of the client's (monitor_main), started at the first
 * acquire of a bound lease (or at connect with keepalive_ms), ended by
 * lbc_close, with every signal blocked. It pings when it has heard nothing
 * for bound / 3 (and, with keepalive_ms, when nothing was written for a
 * third of it), takes the reader role when nobody holds it to hear the
 * answer (any byte counts: last_recv), and tears the session down at
 * last_recv + bound. Without a lease (and keepalive) it sleeps: an idle
 * session is not pinged. The bound is recomputed when the leases change
 * (bound_dirty; a grant wakes the thread, so the first lease's bound
 * applies at once).
 *
 * Sessions. state is DOWN, CONNECTING (one thread connects, without the
 * lock, on a socket nobody else sees yet), UP or CLOSED; gen numbers the
 * sessions. teardown_locked() is the one place a session ends: it shuts the
 * socket down (which wakes a reader or writer blocked on it), fails every
 * request of the session with LBC_DISCONNECTED and marks every lease bound
 * to it lost, before any new session can exist: an old token is never sent
 * on a new session behind the caller's back (detached leases excepted).
 * The descriptor itself is closed only once no thread uses it (dead_fd),
 * so its number is never reused under a reader.
 *
 * Ownership: the client owns its socket, buffers, event queue and the
 * lease handles' links; lease handles themselves are the caller's.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef enum { ST_DOWN, ST_CONNECTING, ST_UP, ST_CLOSED } state_t;

typedef struct qevent {
	struct qevent *next;
	lbc_event_t ev;
	char *strs[6]; /* name, lease, lock, reason, line, watch: owned */
} qevent_t;

struct lbc_client {
	pthread_mutex_t mu;
	pthread_mutex_t wmu;
	pthread_cond_t cv; /* state changes, dead fd closed */
	pthread_cond_t mon_cv; /* wakes the liveness thread */

	/* configuration, fixed by lbc_connect */
	lbc_addr_t addr;
	char *auth, *auth_file, *label;
	int keepalive_ms, connect_timeout_ms, request_timeout_ms;
	bool liveness;        /* the client-side check (liveness_check not off) */
	void (*on_event)(void *, const lbc_event_t *);
	void *event_arg;

	/* the session */
	state_t state;
	int fd;
	int dead_fd;          /* shut down, closed once !reading && !writers */
	uint64_t gen;         /* 0: never connected */
	int writers;          /* threads writing on fd */
	bool reading;         /* a thread reads fd (the reader role) */
	lbc_server_info_t info;
	char *rbuf;           /* bytes read, not yet a complete line */
	size_t rlen, rcap;
	lbc_pending_t *pending;
	lbc_lease_t *leases;
	int lost_unpolled;    /* handles marked lost since the last lbc_poll */
	int64_t last_write;   /* when we last wrote (keepalive pings) */
	int64_t last_recv;    /* when bytes last came from the broker */
	int64_t last_ping;    /* when the liveness thread last pinged */
	bool bound_dirty;     /* the leases changed: held and min_ttl are stale */
	int held;             /* bound leases of the session, not lost */
	int64_t min_ttl;      /* their shortest known TTL (0: none known) */
	int64_t cur_bound;    /* the bound the liveness thread last computed */

	/* reconnect backoff */
	int64_t next_attempt;
	int backoff_ms;

	_Atomic int64_t next_id;

	qevent_t *evq, *evq_tail;
	bool delivering;

	lbc_cwatch_t *watches; /* lbc_watch's, kept across sessions */
	uint64_t watch_seq;
	int changes_unpolled;  /* "changed" events queued since lbc_poll returned */

	pthread_t mon;        /* the liveness thread */
	bool mon_started;
};

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz ? sz : 1);
	if (p == NULL)
		abort();
	return p;
}

static char *xstrdup(const char *s)
{
	char *d = s ? strdup(s) : NULL;
	if (s && d == NULL)
		abort();
	return d;
}

/* ---- small helpers ------------------------------------------------------------ */

void lbc_lock(lbc_client_t *c)
{
	pthread_mutex_lock(&c->mu);
}

void lbc_unlock(lbc_client_t *c)
{
	pthread_mutex_unlock(&c->mu);
}

int64_t lbc_next_id(lbc_client_t *c)
{
	return atomic_fetch_add(&c->next_id, 1);
}

/* Threads are numbered from 1 at their first acquire, process-wide: the
 * owner names the thread on every client (re-entry is per session anyway). */
static _Atomic uint64_t thread_seq = 1;
static _Thread_local uint64_t thread_no;

void lbc_thread_owner(char *buf, size_t len)
{
	if (thread_no == 0)
		thread_no = atomic_fetch_add(&thread_seq, 1);
	snprintf(buf, len, "lbc#t%llu", (unsigned long long)thread_no);
}

int64_t lbc_request_timeout(const lbc_client_t *c)
{
	return c->request_timeout_ms < 0 ? -1 : c->request_timeout_ms;
}

/* Waits on cv until deadline (lbc_now_ms; < 0: none). */
static void timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline)
{
	struct timespec ts;
	int64_t left;

	if (deadline < 0) {
		pthread_cond_wait(cv, mu);
		return;
	}
	left = deadline - lbc_now_ms();
	if (left <= 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

static void init_cond(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

void lbc_pending_init(lbc_pending_t *p, int64_t id)
{
	memset(p, 0, sizeof(*p));
	p->id = id;
	init_cond(&p->cv);
}

void lbc_call_done(lbc_pending_t *p)
{
	lbc_json_free(&p->doc);
	free(p->line);
	p->line = NULL;
	pthread_cond_destroy(&p->cv);
}

static void link_pending(lbc_client_t *c, lbc_pending_t *p)
{
	p->next = c->pending;
	c->pending = p;
}

static void unlink_pending(lbc_client_t *c, lbc_pending_t *p)
{
	for (lbc_pending_t **pp = &c->pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			p->next = NULL;
			return;
		}
}

static void wake_monitor_locked(lbc_client_t *c)
{
	if (c->mon_started)
		pthread_cond_signal(&c->mon_cv);
}

/* The leases changed: the liveness bound is computed again at the
 * thread's next wake-up. A lease that ended can only relax it, which may
 * wait; one held with ttl_ms (0: unknown) wakes the thread when the bound
 * must shrink now (or the check start). */
static void bound_changed_locked(lbc_client_t *c, bool held, int64_t ttl_ms)
{
	c->bound_dirty = true;
	if (held && c->liveness && (c->cur_bound == 0 || (ttl_ms > 0 && ttl_ms / 3 < c->cur_bound)))
		wake_monitor_locked(c);
}

void lbc_bound_changed(lbc_client_t *c, int64_t ttl_ms)
{
	lbc_lock(c);
	bound_changed_locked(c, true, ttl_ms);
	lbc_unlock(c);
}

/* Gives the reader role to a thread that waits, if nobody reads (the
 * liveness thread, when no caller waits: it may be waiting for a sign of
 * life that now nobody would read). */
static void handoff_locked(lbc_client_t *c)
{
	if (c->reading)
		return;
	for (lbc_pending_t *p = c->pending; p; p = p->next)
		if (p->waiting && !p->done) {
			pthread_cond_signal(&p->cv);
			return;
		}
	if (c->last_ping > c->last_recv)
		wake_monitor_locked(c);
}

/* Wakes the lbc_poll waiters (pending id 0). */
static void wake_pollers_locked(lbc_client_t *c)
{
	for (lbc_pending_t *p = c->pending; p; p = p->next)
		if (p->id == 0)
			pthread_cond_signal(&p->cv);
}

static void close_dead_locked(lbc_client_t *c)
{
	if (c->dead_fd >= 0 && !c->reading && c->writers == 0) {
		close(c->dead_fd);
		c->dead_fd = -1;
		pthread_cond_broadcast(&c->cv);
	}
}

/* ---- events ------------------------------------------------------------------- */

static qevent_t *queue_event_locked(lbc_client_t *c, lbc_event_type type, const char *name,
                                    const char *lease, const char *lock, const char *reason,
                                    int64_t grace_ms, const char *line, size_t line_len)
{
	qevent_t *q;

	if (c->on_event == NULL)
		return NULL;
	q = xcalloc(1, sizeof(*q));
	q->strs[0] = xstrdup(name);
	q->strs[1] = xstrdup(lease);
	q->strs[2] = xstrdup(lock);
	q->strs[3] = xstrdup(reason);
	if (line) {
		q->strs[4] = xcalloc(1, line_len + 1);
		memcpy(q->strs[4], line, line_len);
	}
	q->ev.type = type;
	q->ev.name = q->strs[0];
	q->ev.lease = q->strs[1];
	q->ev.lock = q->strs[2];
	q->ev.reason = q->strs[3];
	q->ev.grace_ms = grace_ms;
	q->ev.line = q->strs[4];
	if (c->evq_tail)
		c->evq_tail->next = q;
	else
		c->evq = q;
	c->evq_tail = q;
	return q;
}

static void free_qevent(qevent_t *q)
{
	for (int i = 0; i < 6; i++)
		free(q->strs[i]);
	free(q);
}

void lbc_deliver_events(lbc_client_t *c)
{
	lbc_lock(c);
	if (c->delivering || c->evq == NULL) {
		lbc_unlock(c);
		return;
	}
	c->delivering = true;
	/* none once lbc_close began: the liveness thread would be delivering
	 * "the client was closed" to a program that is closing the client */
	while (c->evq && c->state != ST_CLOSED) {
		qevent_t *q = c->evq;
		c->evq = q->next;
		if (c->evq == NULL)
			c->evq_tail = NULL;
		if (q->ev.type == LBC_EVENT_CHANGED && lbc_cwatch_find_locked(c, q->ev.watch) == NULL) {
			free_qevent(q); /* unwatched since */
			continue;
		}
		lbc_unlock(c);
		lbc_lock_info_t *info = NULL;
		if (q->ev.type == LBC_EVENT_CHANGED && q->ev.line) {
			/* the state, parsed for the callback (NULL if unreadable) */
			lbc_jdoc_t d;
			char m[64];
			if (lbc_json_parse(&d, q->ev.line, strlen(q->ev.line), m, sizeof(m)) == 0 &&
			    lbc_json_type(&d, 0) == LBC_J_OBJ)
				info = lbc_lock_info_from(&d, 0);
			lbc_json_free(&d);
		}
		q->ev.info = info;
		c->on_event(c->event_arg, &q->ev);
		lbc_lock_info_free(info);
		free_qevent(q);
		lbc_lock(c);
	}
	c->delivering = false;
	lbc_unlock(c);
}

/* ---- leases: lost marks ------------------------------------------------------- */

static int mark_one_locked(lbc_client_t *c, lbc_lease_t *l, lbc_lost_reason r)
{
	int expected = LBC_LOST_NONE;

	if (!atomic_compare_exchange_strong(&l->lost, &expected, (int)r))
		return 0;
	c->lost_unpolled++;
	bound_changed_locked(c, false, 0);
	return 1;
}

int lbc_mark_lost_locked(lbc_client_t *c, const char *token, lbc_lost_reason r)
{
	int n = 0;

	for (lbc_lease_t *l = c->leases; l; l = l->next)
		if (strcmp(l->token, token) == 0)
			n += mark_one_locked(c, l, r);
	if (n)
		wake_pollers_locked(c);
	return n;
}

void lbc_link_lease_locked(lbc_client_t *c, lbc_lease_t *l)
{
	l->prev = NULL;
	l->next = c->leases;
	if (c->leases)
		c->leases->prev = l;
	c->leases = l;
	if (!l->detached)
		bound_changed_locked(c, true, atomic_load(&l->ttl_ms));
}

void lbc_unlink_lease_locked(lbc_lease_t *l)
{
	lbc_client_t *c = l->client;

	if (c == NULL)
		return;
	if (l->prev)
		l->prev->next = l->next;
	else if (c->leases == l)
		c->leases = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
	bound_changed_locked(c, false, 0);
}

/* ---- the end of a session ------------------------------------------------------ */

/* Ends the current session (see the file comment). Leases bound to it are
 * lost with reason r; requests in flight fail with st (LBC_DISCONNECTED, or
 * LBC_IO when the broker broke the protocol). Returns how many handles it
 * marked. */
static int teardown_locked(lbc_client_t *c, lbc_lost_reason r, lbc_status st, const char *msg)
{
	uint64_t gen = c->gen;
	int marked = 0;

	if (c->state != ST_UP)
		return 0;
	c->state = ST_DOWN;
	shutdown(c->fd, SHUT_RDWR);
	c->dead_fd = c->fd;
	c->fd = -1;
	c->rlen = 0;
	for (lbc_pending_t *p = c->pending; p; p = p->next)
		if (p->gen == gen && !p->done) {
			p->done = true;
			p->status = st;
			snprintf(p->message, sizeof(p->message), "%s", msg);
			pthread_cond_signal(&p->cv);
		}
	for (lbc_lease_t *l = c->leases; l; l = l->next)
		if (l->gen == gen && !l->detached)
			marked += mark_one_locked(c, l, r);
	queue_event_locked(c, LBC_EVENT_DISCONNECTED, "disconnected", NULL, NULL, msg, 0, NULL, 0);
	wake_pollers_locked(c);
	pthread_cond_broadcast(&c->cv);
	c->bound_dirty = true;
	wake_monitor_locked(c);
	close_dead_locked(c);
	return marked;
}

/* ---- what the broker sends ------------------------------------------------------ */

/* The kept watch that the broker calls bid on this session, or NULL (a
 * watch sent through lbc_request: its events stay LBC_EVENT_OTHER). */
static lbc_cwatch_t *watch_of_locked(lbc_client_t *c, const char *bid)
{
	if (bid == NULL)
		return NULL;
	for (lbc_cwatch_t *w = c->watches; w; w = w->next)
		if (w->gen == c->gen && w->bid && strcmp(w->bid, bid) == 0)
			return w;
	return NULL;
}

void lbc_queue_changed_locked(lbc_client_t *c, const lbc_cwatch_t *w, const char *line,
                              size_t len)
{
	qevent_t *q = queue_event_locked(c, LBC_EVENT_CHANGED, "changed", NULL, w->name, NULL, 0,
	                                 line, len);

	if (q == NULL)
		return;
	q->strs[5] = xstrdup(w->id);
	q->ev.watch = q->strs[5];
	c->changes_unpolled++;
	wake_pollers_locked(c);
}

/* ---- watches kept across sessions ---------------------------------------------------- */

lbc_cwatch_t *lbc_cwatch_new_locked(lbc_client_t *c, const char *name)
{
	lbc_cwatch_t *w = xcalloc(1, sizeof(*w));

	snprintf(w->id, sizeof(w->id), "w%llu", (unsigned long long)++c->watch_seq);
	w->name = xstrdup(name);
	w->linked = true;
	w->inflight = true;
	w->refs = 2; /* the list's, the caller's request's */
	w->next = c->watches;
	c->watches = w;
	return w;
}

lbc_cwatch_t *lbc_cwatch_find_locked(lbc_client_t *c, const char *id)
{
	for (lbc_cwatch_t *w = c->watches; w; w = w->next)
		if (!w->ending && strcmp(w->id, id) == 0)
			return w;
	return NULL;
}

void lbc_cwatch_put_locked(lbc_cwatch_t *w)
{
	if (--w->refs > 0)
		return;
	free(w->name);
	free(w->bid);
	free(w);
}

void lbc_cwatch_unlink_locked(lbc_client_t *c, lbc_cwatch_t *w)
{
	for (lbc_cwatch_t **pp = &c->watches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			w->next = NULL;
			w->linked = false;
			lbc_cwatch_put_locked(w);
			return;
		}
}

lbc_cwatch_t *lbc_cwatch_stale_locked(lbc_client_t *c)
{
	int64_t now = lbc_now_ms();

	if (c->state != ST_UP)
		return NULL;
	for (lbc_cwatch_t *w = c->watches; w; w = w->next)
		if (w->gen != c->gen && !w->inflight && !w->ending && w->retry_at <= now) {
			w->inflight = true;
			w->refs++;
			return w;
		}
	return NULL;
}

bool lbc_has_watches_locked(const lbc_client_t *c)
{
	return c->watches != NULL;
}

uint64_t lbc_session_gen_locked(const lbc_client_t *c)
{
	return c->state == ST_UP ? c->gen : 0;
}

static void handle_event_locked(lbc_client_t *c, const lbc_jdoc_t *d, const char *name,
                                const char *line, size_t len)
{
	const char *reason = lbc_json_str(d, 0, "reason", NULL);

	if (strcmp(name, "lost") == 0) {
		const char *token = lbc_json_str(d, 0, "lease", NULL);
		const char *lock = lbc_json_str(d, 0, "lock", NULL);
		if (token)
			lbc_mark_lost_locked(c, token, lbc_lost_reason_from(reason));
		queue_event_locked(c, LBC_EVENT_LOST, name, token, lock, reason, 0, line, len);
	} else if (strcmp(name, "shutdown") == 0) {
		int64_t g = 0;
		(void)lbc_json_int(d, 0, "grace_ms", &g);
		queue_event_locked(c, LBC_EVENT_SHUTDOWN, name, NULL, NULL, NULL, g, line, len);
	} else if (strcmp(name, "closing") == 0) {
		queue_event_locked(c, LBC_EVENT_CLOSING, name, NULL, NULL, reason, 0, line, len);
	} else if (strcmp(name, "changed") == 0 && watch_of_locked(c, lbc_json_str(d, 0, "watch", NULL))) {
		lbc_cwatch_t *w = watch_of_locked(c, lbc_json_str(d, 0, "watch", NULL));
		if (!w->ending) /* an ending watch's are dropped */
			lbc_queue_changed_locked(c, w, line, len);
	} else {
		queue_event_locked(c, LBC_EVENT_OTHER, name, NULL, NULL, reason, 0, line, len);
	}
}

/* An acquire_all's grant: a handle per entry of leases (none at all when
 * one entry is malformed: the caller answers LBC_IO and the session's
 * end gives them back). */
static void leases_of_all_locked(lbc_client_t *c, lbc_pending_t *p, const lbc_jdoc_t *d)
{
	uint32_t a = lbc_json_get(d, 0, "leases");
	size_t n, i = 0;

	if (lbc_json_type(d, a) != LBC_J_ARR || (n = d->nodes[a].v.c.n) == 0)
		return;
	p->all = xcalloc(n, sizeof(*p->all));
	for (uint32_t k = d->nodes[a].v.c.first; k != LBC_JNONE && i < n; k = d->nodes[k].next) {
		lbc_lease_t *l = lbc_json_type(d, k) == LBC_J_OBJ
		                         ? lbc_lease_from_answer(c, d, k, c->gen, p->lease_detached)
		                         : NULL;
		if (l == NULL)
			break;
		p->all[i++] = l;
	}
	if (i < n) {
		while (i > 0) {
			lbc_lease_t *l = p->all[--i];
			lbc_unlink_lease_locked(l);
			free(l->name);
			free(l);
		}
		free(p->all);
		p->all = NULL;
		return;
	}
	p->nall = n;
}

/* One complete line. Returns -1 when it ended the session (bad data). */
static int dispatch_locked(lbc_client_t *c, const char *line, size_t len)
{
	lbc_jdoc_t d;
	char msg[128];
	const char *ev;
	int64_t id;

	if (lbc_json_parse(&d, line, len, msg, sizeof(msg)) < 0 || lbc_json_type(&d, 0) != LBC_J_OBJ) {
		lbc_json_free(&d);
		teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_IO,
		                "the broker sent a line that is not a JSON object; connection dropped");
		return -1;
	}
	ev = lbc_json_str(&d, 0, "event", NULL);
	if (ev) {
		handle_event_locked(c, &d, ev, line, len);
		lbc_json_free(&d);
		return 0;
	}
	/* an answer with "id": null (a line the broker could not read) has
	 * nobody to go to: our lines are always valid, so it is dropped */
	if (lbc_json_int(&d, 0, "id", &id) < 0 || id == 0) {
		lbc_json_free(&d);
		return 0;
	}
	for (lbc_pending_t *p = c->pending; p; p = p->next) {
		if (p->id != id || p->done || p->gen != c->gen)
			continue;
		if (p->want_line) {
			p->line = xcalloc(1, len + 1);
			memcpy(p->line, line, len);
		}
		if (p->is_acquire && lbc_json_true(&d, 0, "ok"))
			p->lease = lbc_lease_from_answer(c, &d, 0, c->gen, p->lease_detached);
		if (p->is_acquire_all && lbc_json_true(&d, 0, "ok"))
			leases_of_all_locked(c, p, &d);
		if (p->watch && lbc_json_true(&d, 0, "ok") && lbc_json_str(&d, 0, "watch", NULL)) {
			/* from here on its events are the caller's; a re-watch's
			 * answer (the state read afresh) is one of them, queued
			 * here so that it comes before the changes behind it */
			free(p->watch->bid);
			p->watch->bid = xstrdup(lbc_json_str(&d, 0, "watch", NULL));
			p->watch->gen = c->gen;
			if (p->rewatch && p->watch->linked && !p->watch->ending)
				lbc_queue_changed_locked(c, p->watch, line, len);
		}
		p->doc = d;
		p->done = true;
		p->status = LBC_OK;
		pthread_cond_signal(&p->cv);
		return 0;
	}
	lbc_json_free(&d);
	return 0;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t')
			return false;
	return true;
}

/* Hands out every complete line of rbuf. */
static void process_locked(lbc_client_t *c)
{
	uint64_t gen = c->gen;
	size_t start = 0;

	while (c->state == ST_UP && c->gen == gen) {
		char *nl = memchr(c->rbuf + start, '\n', c->rlen - start);
		size_t len;

		if (nl == NULL)
			break;
		len = (size_t)(nl - (c->rbuf + start));
		if (len > 0 && c->rbuf[start + len - 1] == '\r')
			len--;
		if (!blank(c->rbuf + start, len) && dispatch_locked(c, c->rbuf + start, len) < 0)
			return;
		start = (size_t)(nl - c->rbuf) + 1;
	}
	if (c->state != ST_UP || c->gen != gen)
		return;
	memmove(c->rbuf, c->rbuf + start, c->rlen - start);
	c->rlen -= start;
	if (c->rlen > LBC_MAX_ANSWER)
		teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_IO,
		                "the broker sent a line longer than 16 MiB; connection dropped");
}

/* The reader role for one read: polls fd (and extra_fd) until deadline with
 * the lock released, then hands out what arrived. Called with the lock
 * held, the session up and nobody reading. */
static void read_once(lbc_client_t *c, int64_t deadline, int extra_fd)
{
	char buf[16384];
	struct pollfd pf[2];
	int fd = c->fd, err = 0, r = 0;
	uint64_t gen = c->gen;
	ssize_t got = -1;

	c->reading = true;
	lbc_unlock(c);
	if (extra_fd < 0 && (deadline < 0 || deadline - lbc_now_ms() >= LBC_RECV_SLICE_MS)) {
		/* a far deadline: block in recv (one slice at most; shutdown()
		 * by a teardown wakes it) */
		got = recv(fd, buf, sizeof(buf), 0);
		if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			err = errno;
	} else {
		pf[0] = (struct pollfd){.fd = fd, .events = POLLIN};
		pf[1] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
		r = poll(pf, extra_fd >= 0 ? 2 : 1, lbc_poll_ms(deadline));
		if (r > 0 && pf[0].revents) {
			got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				err = errno;
		}
	}
	lbc_lock(c);
	c->reading = false;
	if (c->state == ST_UP && c->gen == gen) {
		if (got > 0) {
			c->last_recv = lbc_now_ms(); /* a sign of life */
			if (c->rlen + (size_t)got > c->rcap) {
				size_t cap = c->rcap ? c->rcap : 16384;
				while (cap < c->rlen + (size_t)got)
					cap *= 2;
				c->rbuf = realloc(c->rbuf, cap);
				if (c->rbuf == NULL)
					abort();
				c->rcap = cap;
			}
			memcpy(c->rbuf + c->rlen, buf, (size_t)got);
			c->rlen += (size_t)got;
			process_locked(c);
		} else if (got == 0) {
			teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_DISCONNECTED,
			                "the broker closed the connection");
		} else if (err) {
			char m[128];
			snprintf(m, sizeof(m), "reading from the broker: %s", strerror(err));
			teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_DISCONNECTED, m);
		}
	}
	close_dead_locked(c);
}

/* ---- connecting ------------------------------------------------------------------- */

static void fill_info(lbc_server_info_t *info, const lbc_jdoc_t *d)
{
	uint32_t lim = lbc_json_get(d, 0, "limits");
	const char *s;

	memset(info, 0, sizeof(*info));
	if ((s = lbc_json_str(d, 0, "server", NULL)))
		snprintf(info->server, sizeof(info->server), "%s", s);
	if ((s = lbc_json_str(d, 0, "session", NULL)))
		snprintf(info->session, sizeof(info->session), "%s", s);
	if ((s = lbc_json_str(d, 0, "broker", NULL)))
		snprintf(info->broker, sizeof(info->broker), "%s", s);
	(void)lbc_json_int(d, 0, "proto", &info->proto);
	(void)lbc_json_int(d, lim, "max_line", &info->max_line);
	(void)lbc_json_int(d, lim, "ttl_ms_min", &info->ttl_ms_min);
	(void)lbc_json_int(d, lim, "ttl_ms_max", &info->ttl_ms_max);
	(void)lbc_json_int(d, lim, "max_leases_per_session", &info->max_leases_per_session);
	(void)lbc_json_int(d, lim, "max_waiters_per_session", &info->max_waiters_per_session);
	(void)lbc_json_int(d, lim, "max_inflight", &info->max_inflight);
	(void)lbc_json_int(d, lim, "keepalive_ms_min", &info->keepalive_ms_min);
	(void)lbc_json_int(d, lim, "keepalive_ms_max", &info->keepalive_ms_max);
	if (info->max_line <= 0)
		info->max_line = 65536;
	info->authorized = true;
}

/* Connects and says hello, without the lock (nobody else sees the socket
 * yet). LBC_OK with *fd_out, *info and the bytes that came after hello's
 * answer (*rest, *rest_len; malloc'd or NULL). */
static lbc_status open_session(lbc_client_t *c, int64_t deadline, int *fd_out,
                               lbc_server_info_t *info, char **rest, size_t *rest_len,
                               lbc_error_t *err)
{
	char msg[200], *secret = NULL, *buf = NULL;
	size_t blen = 0, bcap = 0;
	int fd, e = 0;
	int64_t id = lbc_next_id(c);
	lbc_jw_t w;
	char closing[64] = "";
	lbc_status st = LBC_IO;

	*rest = NULL;
	*rest_len = 0;
	if (c->auth_file) {
		if (lbc_url_read_secret(c->auth_file, &secret, msg, sizeof(msg)) < 0)
			return lbc_set_error(err, LBC_INVALID_ARGUMENT, msg);
	} else if (c->auth) {
		secret = xstrdup(c->auth);
	}
	fd = lbc_sock_open(&c->addr, deadline, &e, msg, sizeof(msg));
	if (fd < 0) {
		free(secret);
		lbc_set_error(err, LBC_DISCONNECTED, msg);
		if (err)
			err->sys_errno = e;
		return LBC_DISCONNECTED;
	}
	lbc_jw_init(&w);
	lbc_req_begin(&w, id, "hello");
	lbc_jw_kstr(&w, "client", c->label);
	if (secret)
		lbc_jw_kstr(&w, "auth", secret);
	if (c->keepalive_ms > 0)
		lbc_jw_kint(&w, "keepalive_ms", c->keepalive_ms);
	lbc_req_finish(&w);
	if (secret) {
		memset(secret, 0, strlen(secret));
		free(secret);
	}
	e = lbc_sock_write(fd, w.buf, w.len, deadline);
	memset(w.buf, 0, w.len); /* it held the secret */
	lbc_jw_free(&w);
	if (e) {
		close(fd);
		lbc_set_errorf(err, LBC_DISCONNECTED, "sending hello: %s", strerror(e));
		if (err)
			err->sys_errno = e;
		return LBC_DISCONNECTED;
	}
	for (;;) {
		char *nl;
		struct pollfd pf = {.fd = fd, .events = POLLIN};

		while ((nl = blen ? memchr(buf, '\n', blen) : NULL) != NULL) {
			size_t len = (size_t)(nl - buf), used = len + 1;
			lbc_jdoc_t d;
			int64_t got_id;

			if (len > 0 && buf[len - 1] == '\r')
				len--;
			if (blank(buf, len)) {
				memmove(buf, buf + used, blen - used);
				blen -= used;
				continue;
			}
			if (lbc_json_parse(&d, buf, len, msg, sizeof(msg)) < 0 ||
			    lbc_json_type(&d, 0) != LBC_J_OBJ) {
				lbc_json_free(&d);
				st = lbc_set_error(err, LBC_IO, "the broker answered hello with something that is not a JSON object");
				goto fail;
			}
			if (lbc_json_str(&d, 0, "event", NULL)) {
				const char *r = lbc_json_str(&d, 0, "reason", NULL);
				if (r)
					snprintf(closing, sizeof(closing), "%s", r);
			} else if (lbc_json_int(&d, 0, "id", &got_id) == 0 && got_id == id) {
				memmove(buf, buf + used, blen - used);
				blen -= used;
				if (lbc_json_true(&d, 0, "ok")) {
					fill_info(info, &d);
				} else {
					lbc_error_t e2;
					st = lbc_set_broker_error(&e2, &d);
					if (st != LBC_UNAUTHORIZED || c->auth || c->auth_file) {
						if (err)
							*err = e2;
						lbc_json_free(&d);
						goto fail;
					}
					/* no secret given: ping works, the rest says unauthorized */
					memset(info, 0, sizeof(*info));
					info->max_line = 65536;
					info->authorized = false;
				}
				lbc_json_free(&d);
				*fd_out = fd;
				if (blen) {
					*rest = buf;
					*rest_len = blen;
				} else {
					free(buf);
				}
				return LBC_OK;
			}
			lbc_json_free(&d);
			memmove(buf, buf + used, blen - used);
			blen -= used;
		}
		int r = poll(&pf, 1, lbc_poll_ms(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0 && lbc_poll_ms(deadline) == 0) {
			st = lbc_set_error(err, LBC_DISCONNECTED, "no answer to hello in time");
			goto fail;
		}
		if (r <= 0)
			continue;
		if (blen + 16384 > bcap) {
			bcap = bcap ? bcap * 2 : 32768;
			if (bcap > LBC_MAX_ANSWER) {
				st = lbc_set_error(err, LBC_IO, "the broker's answer to hello is too long");
				goto fail;
			}
			buf = realloc(buf, bcap);
			if (buf == NULL)
				abort();
		}
		ssize_t n = recv(fd, buf + blen, bcap - blen, MSG_DONTWAIT);
		if (n > 0) {
			blen += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (closing[0])
			st = lbc_set_errorf(err, LBC_DISCONNECTED,
			                    "the broker closed the connection during hello (closing: %s)",
			                    closing);
		else
			st = lbc_set_errorf(err, LBC_DISCONNECTED,
			                    "the broker closed the connection during hello%s%s",
			                    n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
		goto fail;
	}
fail:
	free(buf);
	close(fd);
	return st;
}

static bool fatal_connect_error(lbc_status st)
{
	return st != LBC_DISCONNECTED && st != LBC_IO && st != LBC_UNAVAILABLE &&
	       st != LBC_SHUTTING_DOWN && st != LBC_LIMIT_EXCEEDED;
}

/* Returns with the session up (LBC_OK), or why not, within
 * connect_timeout_ms (or by cap, when cap >= 0 is sooner). Lock held; it
 * is released while connecting. */
static lbc_status ensure_session_locked(lbc_client_t *c, bool single_attempt, int64_t cap,
                                        lbc_error_t *err)
{
	int64_t deadline = lbc_now_ms() + c->connect_timeout_ms;

	if (cap >= 0 && cap < deadline)
		deadline = cap;
	lbc_error_t last;
	bool tried = false;

	lbc_set_error(&last, LBC_DISCONNECTED, "cannot connect to the broker");
	for (;;) {
		int64_t now = lbc_now_ms();

		switch (c->state) {
		case ST_UP:
			return LBC_OK;
		case ST_CLOSED:
			return lbc_set_error(err, LBC_DISCONNECTED, "the client is closed");
		case ST_CONNECTING:
			if (now >= deadline)
				return lbc_set_error(err, LBC_DISCONNECTED,
				                     "another thread's connection attempt took too long");
			timedwait(&c->cv, &c->mu, deadline);
			continue;
		case ST_DOWN:
			break;
		}
		/* the backoff delays an attempt, but a call always gets one,
		 * at its deadline at the latest */
		int64_t attempt_at = c->next_attempt < deadline ? c->next_attempt : deadline;
		if ((tried && now >= deadline) || (c->dead_fd >= 0 && now >= deadline)) {
			if (err)
				*err = last;
			return last.status;
		}
		if (c->dead_fd >= 0 || (!tried && attempt_at > now) || (tried && c->next_attempt > now)) {
			timedwait(&c->cv, &c->mu, c->dead_fd >= 0 ? deadline : attempt_at);
			continue;
		}

		int fd = -1;
		lbc_server_info_t info;
		char *rest = NULL;
		size_t rest_len = 0;
		lbc_status st;

		c->state = ST_CONNECTING;
		lbc_unlock(c);
		/* an attempt at the deadline still gets a moment to connect */
		int64_t attempt_deadline = deadline > now + 100 ? deadline : now + 100;
		st = open_session(c, attempt_deadline, &fd, &info, &rest, &rest_len, &last);
		lbc_lock(c);
		tried = true;
		if (st == LBC_OK) {
			c->fd = fd;
			c->gen++;
			c->state = ST_UP;
			c->info = info;
			c->backoff_ms = 0;
			c->next_attempt = 0;
			c->last_write = c->last_recv = lbc_now_ms();
			c->last_ping = 0;
			c->rlen = 0;
			c->bound_dirty = true;
			wake_monitor_locked(c);
			if (rest) {
				free(c->rbuf);
				c->rbuf = rest;
				c->rlen = c->rcap = rest_len;
				process_locked(c);
			}
			pthread_cond_broadcast(&c->cv);
			if (c->state == ST_UP)
				return LBC_OK;
			continue;
		}
		c->state = ST_DOWN;
		pthread_cond_broadcast(&c->cv);
		/* 50 ms doubling to 2 s, each drawn from its upper half */
		c->backoff_ms = c->backoff_ms ? (c->backoff_ms * 2 > 2000 ? 2000 : c->backoff_ms * 2) : 50;
		c->next_attempt = lbc_now_ms() + c->backoff_ms / 2 +
		                  (int64_t)(((uint64_t)lbc_now_ms() * 2654435761u >> 7) %
		                            (uint64_t)(c->backoff_ms / 2 + 1));
		if (fatal_connect_error(st) || single_attempt) {
			if (err)
				*err = last;
			return st;
		}
	}
}

bool lbc_session_wait_locked(lbc_client_t *c, int64_t deadline)
{
	bool tried = false;

	for (;;) {
		int64_t now = lbc_now_ms();

		if (c->state == ST_UP)
			return true;
		if (c->state == ST_CLOSED)
			return false;
		/* an attempt when the backoff allows, even at the deadline
		 * (lbc_poll(c, 0) in an event loop), one per call then */
		if (c->state == ST_DOWN && c->dead_fd < 0 && c->next_attempt <= now && !tried) {
			tried = true;
			/* within the caller's time (a moment at least) */
			(void)ensure_session_locked(c, true, deadline >= 0 && deadline > now + 100 ? deadline : now + 100,
			                            NULL);
			continue;
		}
		if (deadline >= 0 && now >= deadline)
			return false;
		/* connecting in another thread, the old socket still in use, or
		 * the backoff: wait for a change (or the next attempt) */
		int64_t until = c->state == ST_DOWN && c->dead_fd < 0 ? c->next_attempt : now + 50;
		if (until <= now)
			until = now + 10;
		tried = false;
		timedwait(&c->cv, &c->mu, deadline >= 0 && deadline < until ? deadline : until);
	}
}

/* ---- requests ----------------------------------------------------------------------- */

void lbc_req_begin(lbc_jw_t *w, int64_t id, const char *op)
{
	lbc_jw_raw(w, "{", 1);
	lbc_jw_kint(w, "id", id);
	if (op)
		lbc_jw_kstr(w, "op", op);
}

void lbc_req_finish(lbc_jw_t *w)
{
	lbc_jw_raw(w, "}\n", 2);
}

enum { W_ANSWERED, W_TIMEDOUT, W_CANCEL };

/* Waits for p's answer (lock held). */
static int wait_answer_locked(lbc_client_t *c, lbc_pending_t *p, int64_t deadline,
                              lbc_cancel_t *cancel, int cancel_fd)
{
	int rc = W_ANSWERED;

	p->waiting = true;
	while (!p->done) {
		int64_t now = lbc_now_ms();

		if (cancel && lbc_cancel_fired(cancel)) {
			rc = W_CANCEL;
			break;
		}
		if (deadline >= 0 && now >= deadline) {
			rc = W_TIMEDOUT;
			break;
		}
		if (c->state != ST_UP || c->gen != p->gen) { /* teardown marks it done; be safe */
			p->done = true;
			p->status = LBC_DISCONNECTED;
			snprintf(p->message, sizeof(p->message), "the connection to the broker ended");
			break;
		}
		if (!c->reading) {
			read_once(c, deadline, cancel ? cancel_fd : -1);
			continue;
		}
		int64_t until = deadline;
		if (cancel && (until < 0 || until > now + 20))
			until = now + 20; /* not the reader: look at the token now and then */
		timedwait(&p->cv, &c->mu, until);
	}
	p->waiting = false;
	handoff_locked(c);
	return rc;
}

/* After a write of session gen that ended with errno e (0: written), the
 * lock taken again: a failed write ends the session (when it is still
 * the current one). */
static void relock_after_write(lbc_client_t *c, uint64_t gen, int e)
{
	lbc_lock(c);
	c->writers--;
	c->last_write = lbc_now_ms();
	if (e && c->state == ST_UP && c->gen == gen) {
		char m[128];
		snprintf(m, sizeof(m), "writing to the broker: %s", strerror(e));
		teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_DISCONNECTED, m);
	}
	close_dead_locked(c);
}

/* Writes w on session gen (the current one). Lock held on entry and exit. */
static void write_locked(lbc_client_t *c, uint64_t gen, const lbc_jw_t *w, int64_t deadline)
{
	int fd = c->fd, e;

	c->writers++;
	lbc_unlock(c);
	pthread_mutex_lock(&c->wmu);
	e = lbc_sock_write(fd, w->buf, w->len, deadline);
	pthread_mutex_unlock(&c->wmu);
	relock_after_write(c, gen, e);
}

lbc_status lbc_call(lbc_client_t *c, lbc_pending_t *p, lbc_jw_t *w, int64_t timeout_ms,
                    lbc_cancel_t *cancel, lbc_error_t *err)
{
	lbc_status st = LBC_OK;
	int64_t deadline, wdeadline;
	int rc;

	if (w->bad) {
		return lbc_set_error(err, LBC_INVALID_ARGUMENT,
		                     "a string of the request is not valid UTF-8");
	}
	lbc_lock(c);
	if ((p->no_connect && c->state != ST_UP) ||
	    (p->only_gen && (c->state != ST_UP || c->gen != p->only_gen)))
		st = lbc_set_error(err, LBC_DISCONNECTED, "no session");
	else
		st = ensure_session_locked(c, false, -1, err);
	if (st != LBC_OK) {
		lbc_unlock(c);
		lbc_deliver_events(c);
		return st;
	}
	if ((int64_t)(w->len - 1) > c->info.max_line) {
		int64_t max = c->info.max_line;
		lbc_unlock(c);
		return lbc_set_errorf(err, LBC_LINE_TOO_LONG,
		                      "the request (%zu bytes) is longer than the broker's max_line (%lld bytes)",
		                      w->len - 1, (long long)max);
	}
	p->gen = c->gen;
	link_pending(c, p);
	wdeadline = lbc_request_timeout(c) < 0 ? -1 : lbc_now_ms() + lbc_request_timeout(c);
	write_locked(c, p->gen, w, wdeadline);
	deadline = timeout_ms < 0 ? -1 : lbc_now_ms() + timeout_ms;
	rc = wait_answer_locked(c, p, deadline, cancel, cancel ? lbc_cancel_rfd(cancel) : -1);
	if (rc == W_CANCEL && (p->done || c->state != ST_UP || c->gen != p->gen)) {
		rc = W_ANSWERED; /* answered meanwhile, or its session ended */
	} else if (rc == W_CANCEL) {
		/* ask the broker to give the wait up, then take whatever the
		 * acquire answers (cancelled, or a grant that crossed the cancel) */
		lbc_pending_t q;
		lbc_jw_t cw;

		lbc_pending_init(&q, lbc_next_id(c));
		lbc_jw_init(&cw);
		lbc_req_begin(&cw, q.id, "cancel");
		lbc_jw_kint(&cw, "target", p->id);
		lbc_req_finish(&cw);
		p->cancel_sent = true;
		q.gen = p->gen;
		link_pending(c, &q);
		int64_t d2 = lbc_request_timeout(c) < 0 ? -1 : lbc_now_ms() + lbc_request_timeout(c);
		write_locked(c, q.gen, &cw, d2);
		lbc_jw_free(&cw);
		rc = wait_answer_locked(c, p, d2, NULL, -1);
		if (rc == W_ANSWERED)
			(void)wait_answer_locked(c, &q, d2, NULL, -1);
		unlink_pending(c, &q);
		lbc_call_done(&q);
	}
	if (rc == W_TIMEDOUT && c->state == ST_UP && c->gen == p->gen) {
		char m[128];
		snprintf(m, sizeof(m), "no answer from the broker within %lld ms; connection dropped",
		         (long long)(timeout_ms < 0 ? lbc_request_timeout(c) : timeout_ms));
		teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_DISCONNECTED, m);
		p->status = LBC_DISCONNECTED;
		snprintf(p->message, sizeof(p->message), "%s", m);
	}
	unlink_pending(c, p);
	handoff_locked(c);
	st = !p->done ? LBC_DISCONNECTED : p->status == LBC_IO ? LBC_IO
	   : p->status == LBC_OK ? LBC_OK : LBC_DISCONNECTED;
	if (st != LBC_OK)
		lbc_set_error(err, st, p->message[0] ? p->message : NULL);
	lbc_unlock(c);
	lbc_deliver_events(c);
	return st;
}

/* ---- the client ------------------------------------------------------------------------ */

static void *monitor_main(void *arg);

static void default_label(char *buf, size_t len)
{
	char prog[64] = "c";
	FILE *f = fopen("/proc/self/comm", "re");

	if (f) {
		if (fgets(prog, sizeof(prog), f) == NULL)
			snprintf(prog, sizeof(prog), "c");
		prog[strcspn(prog, "\n")] = '\0';
		fclose(f);
	}
	char host[64] = "-";

	if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
		snprintf(host, sizeof(host), "-");
	host[40] = '\0';
	prog[40] = '\0';
	/* the same shape in every client: PROGRAM[PID]@HOST lockbroker-LANG/VERSION */
	snprintf(buf, len, "%.40s[%ld]@%.40s lockbroker-c/%.16s", prog, (long)getpid(), host, LBC_VERSION);
}

lbc_client_t *lbc_connect(const char *url, const lbc_options_t *opts, lbc_error_t *err)
{
	lbc_options_t o = {0};
	lbc_client_t *c;
	char msg[160], label[LBC_OWNER_MAX + 1];
	lbc_addr_t addr;
	lbc_status st;

	if (opts)
		o = *opts;
	if (url == NULL)
		url = lbc_default_url();
	if (lbc_url_parse(url, &addr, msg, sizeof(msg)) < 0) {
		lbc_set_errorf(err, LBC_INVALID_ARGUMENT, "bad broker URL: %s", msg);
		return NULL;
	}
	if (o.auth && o.auth_file) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT, "give auth or auth_file, not both");
		return NULL;
	}
	if (o.auth && (strlen(o.auth) > 65536 || !lbc_utf8_valid(o.auth, strlen(o.auth)))) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT, "auth must be UTF-8 text of at most 64 KiB");
		return NULL;
	}
	if (o.keepalive_ms != 0 && (o.keepalive_ms < 500 || o.keepalive_ms > 600000)) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT, "keepalive_ms must be 0 or 500..600000");
		return NULL;
	}
	if (o.liveness_check < LBC_OFF || o.liveness_check > LBC_ON) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT,
		              "liveness_check must be LBC_DEFAULT, LBC_ON or LBC_OFF");
		return NULL;
	}
	if (o.connect_timeout_ms < 0) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT, "connect_timeout_ms must be >= 0");
		return NULL;
	}
	if (o.client_label) {
		size_t n = strlen(o.client_label);
		if (n > LBC_OWNER_MAX || !lbc_utf8_valid(o.client_label, n)) {
			lbc_set_error(err, LBC_INVALID_ARGUMENT,
			              "client_label must be UTF-8 of at most 128 bytes");
			return NULL;
		}
		snprintf(label, sizeof(label), "%s", o.client_label);
	} else {
		default_label(label, sizeof(label));
	}

	c = xcalloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->wmu, NULL);
	init_cond(&c->cv);
	init_cond(&c->mon_cv);
	c->addr = addr;
	c->auth = xstrdup(o.auth);
	c->auth_file = xstrdup(o.auth_file);
	c->label = xstrdup(label);
	c->keepalive_ms = o.keepalive_ms;
	c->liveness = o.liveness_check != LBC_OFF;
	c->connect_timeout_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 5000;
	c->request_timeout_ms = o.request_timeout_ms ? o.request_timeout_ms : 10000;
	c->on_event = o.on_event;
	c->event_arg = o.event_arg;
	c->state = ST_DOWN;
	c->fd = c->dead_fd = -1;
	atomic_init(&c->next_id, 1);

	lbc_lock(c);
	st = ensure_session_locked(c, true, -1, err);
	lbc_unlock(c);
	if (st != LBC_OK) {
		lbc_close(c);
		return NULL;
	}
	if (c->keepalive_ms > 0 && lbc_liveness_start(c, err) != LBC_OK) {
		lbc_close(c);
		return NULL;
	}
	return c;
}

lbc_status lbc_liveness_start(lbc_client_t *c, lbc_error_t *err)
{
	sigset_t all, old;
	int r = 0;

	lbc_lock(c);
	if (!c->mon_started && c->state != ST_CLOSED && (c->liveness || c->keepalive_ms > 0)) {
		/* every signal blocked in the thread: they are the program's */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		r = pthread_create(&c->mon, NULL, monitor_main, c);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		c->mon_started = r == 0;
	}
	lbc_unlock(c);
	if (r != 0)
		return lbc_set_errorf(err, LBC_IO, "cannot start the client's liveness thread: %s",
		                      strerror(r));
	return LBC_OK;
}

/* The longest silence of the broker tolerated now (ms), 0 for none. */
static int64_t bound_locked(lbc_client_t *c)
{
	int64_t b;

	if (!c->liveness)
		return c->cur_bound = c->keepalive_ms;
	if (c->bound_dirty) {
		c->held = 0;
		c->min_ttl = 0;
		for (lbc_lease_t *l = c->leases; l; l = l->next) {
			int64_t ttl = atomic_load(&l->ttl_ms);
			if (l->gen != c->gen || l->detached || atomic_load(&l->lost) != LBC_LOST_NONE)
				continue;
			c->held++;
			if (ttl > 0 && (c->min_ttl == 0 || ttl < c->min_ttl))
				c->min_ttl = ttl;
		}
		c->bound_dirty = false;
	}
	if (c->held == 0)
		return c->cur_bound = c->keepalive_ms;
	b = c->keepalive_ms > 0 ? c->keepalive_ms : LBC_LIVENESS_DEFAULT_MS;
	if (c->min_ttl > 0 && c->min_ttl / 3 < b)
		b = c->min_ttl / 3;
	return c->cur_bound = b > 0 ? b : 1;
}

/* The liveness thread's ping. Nobody waits for its answer (its id is no
 * pending request's: dispatch drops it); the bytes are the sign of life.
 * Returns false, sending nothing, while another thread writes (try again
 * shortly): the lock is never held while waiting for wmu. */
static bool send_ping_locked(lbc_client_t *c, int64_t deadline)
{
	char line[64];
	int fd = c->fd, e, n;
	uint64_t gen = c->gen;

	if (pthread_mutex_trylock(&c->wmu) != 0)
		return false;
	n = snprintf(line, sizeof(line), "{\"id\":%lld,\"op\":\"ping\"}\n",
	             (long long)lbc_next_id(c));
	c->writers++;
	c->last_ping = lbc_now_ms();
	lbc_unlock(c);
	e = lbc_sock_write(fd, line, (size_t)n, deadline);
	pthread_mutex_unlock(&c->wmu);
	relock_after_write(c, gen, e);
	return true;
}

static int64_t earliest(int64_t a, int64_t b)
{
	return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* The liveness thread (see the file comment). It never connects: the next
 * call of the application does. */
static void *monitor_main(void *arg)
{
	lbc_client_t *c = arg;
	int64_t retry_at = -1; /* another thread was writing: ping then */

	lbc_lock(c);
	while (c->state != ST_CLOSED) {
		int64_t now = lbc_now_ms(), b, ka = c->keepalive_ms, ping_at = -1, dead_at = -1;

		if (c->state != ST_UP) {
			timedwait(&c->mon_cv, &c->mu, -1);
			continue;
		}
		b = bound_locked(c);
		if (b > 0) {
			dead_at = c->last_recv + b;
			if (now >= dead_at) {
				char m[160];
				if (c->liveness && c->held > 0)
					snprintf(m, sizeof(m),
					         "no answer from the broker for %lld ms (liveness check: at most "
					         "%lld ms while a lease is held); connection dropped",
					         (long long)(now - c->last_recv), (long long)b);
				else
					snprintf(m, sizeof(m),
					         "no answer from the broker for %lld ms (keepalive_ms %d); "
					         "connection dropped",
					         (long long)(now - c->last_recv), c->keepalive_ms);
				teardown_locked(c, LBC_LOST_DISCONNECTED, LBC_DISCONNECTED, m);
				lbc_unlock(c);
				lbc_deliver_events(c);
				lbc_lock(c);
				continue;
			}
			ping_at = (c->last_recv > c->last_ping ? c->last_recv : c->last_ping) + b / 3;
		}
		if (ka > 0)
			ping_at = earliest(ping_at, c->last_write + ka / 3);
		if (ping_at >= 0 && retry_at >= 0 && ping_at < retry_at)
			ping_at = retry_at;
		if (ping_at >= 0 && now >= ping_at) {
			retry_at = send_ping_locked(c, dead_at >= 0 ? dead_at : now + (ka > 0 ? ka : 1000))
			               ? -1 : now + 5;
			lbc_unlock(c);
			lbc_deliver_events(c);
			lbc_lock(c);
			continue;
		}
		int64_t next = earliest(ping_at, dead_at);
		if (b > 0 && c->last_ping > c->last_recv && !c->reading) {
			/* a ping waits for its answer and nobody reads: read */
			read_once(c, next, -1);
			handoff_locked(c);
			lbc_unlock(c);
			lbc_deliver_events(c);
			lbc_lock(c);
			continue;
		}
		timedwait(&c->mon_cv, &c->mu, next);
	}
	lbc_unlock(c);
	return NULL;
}

int lbc_close(lbc_client_t *c)
{
	int marked;

	if (c == NULL)
		return 0;
	lbc_lock(c);
	marked = teardown_locked(c, LBC_LOST_CLOSED, LBC_DISCONNECTED, "the client was closed");
	c->state = ST_CLOSED;
	pthread_cond_broadcast(&c->cv);
	wake_monitor_locked(c);
	lbc_unlock(c);
	if (c->mon_started) /* teardown's shutdown() woke it if it was reading */
		pthread_join(c->mon, NULL);
	lbc_lock(c);
	close_dead_locked(c);
	if (c->dead_fd >= 0) { /* nobody can be using it any more */
		close(c->dead_fd);
		c->dead_fd = -1;
	}
	/* handles outlive the client: they answer "lost, closed" (detached
	 * ones stay unlost: the broker keeps them) */
	while (c->leases) {
		lbc_lease_t *l = c->leases;
		if (!l->detached)
			marked += mark_one_locked(c, l, LBC_LOST_CLOSED);
		lbc_unlink_lease_locked(l);
		l->client = NULL;
	}
	while (c->evq) {
		qevent_t *q = c->evq;
		c->evq = q->next;
		free_qevent(q);
	}
	while (c->watches) /* no request holds one now */
		lbc_cwatch_unlink_locked(c, c->watches);
	lbc_unlock(c);
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->wmu);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->mon_cv);
	free(c->rbuf);
	if (c->auth)
		memset(c->auth, 0, strlen(c->auth));
	free(c->auth);
	free(c->auth_file);
	free(c->label);
	free(c);
	return marked;
}

int lbc_fd(lbc_client_t *c)
{
	int fd;

	if (c == NULL)
		return -1;
	lbc_lock(c);
	fd = c->state == ST_UP ? c->fd : -1;
	lbc_unlock(c);
	return fd;
}

lbc_status lbc_server_info(lbc_client_t *c, lbc_server_info_t *out, lbc_error_t *err)
{
	if (c == NULL || out == NULL)
		return lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL argument");
	lbc_lock(c);
	if (c->state != ST_UP) {
		lbc_unlock(c);
		return lbc_set_error(err, LBC_DISCONNECTED, "no session");
	}
	*out = c->info;
	lbc_unlock(c);
	return LBC_OK;
}

int lbc_poll(lbc_client_t *c, int timeout_ms, lbc_error_t *err)
{
	lbc_pending_t q;
	int64_t deadline = timeout_ms < 0 ? -1 : lbc_now_ms() + timeout_ms;
	bool did_read = false;
	int n;

	if (c == NULL) {
		lbc_set_error(err, LBC_INVALID_ARGUMENT, "NULL client");
		return -1;
	}
	/* a loss or a change already there is reported first: watching
	 * again may wait for a broker */
	lbc_lock(c);
	bool news = c->lost_unpolled > 0 || c->changes_unpolled > 0;
	lbc_unlock(c);
	if (!news)
		lbc_watches_resume(c, deadline);
	lbc_pending_init(&q, 0);
	lbc_lock(c);
	q.gen = c->gen;
	link_pending(c, &q);
	for (;;) {
		if (c->lost_unpolled > 0 || c->changes_unpolled > 0 || c->state != ST_UP)
			break;
		if (!c->reading) {
			if (did_read && deadline >= 0 && lbc_now_ms() >= deadline)
				break;
			read_once(c, deadline, -1);
			did_read = true;
			continue;
		}
		if (deadline >= 0 && lbc_now_ms() >= deadline)
			break;
		q.waiting = true;
		timedwait(&q.cv, &c->mu, deadline);
		q.waiting = false;
	}
	n = c->lost_unpolled;
	c->lost_unpolled = 0;
	c->changes_unpolled = 0;
	unlink_pending(c, &q);
	handoff_locked(c);
	lbc_unlock(c);
	lbc_call_done(&q);
	lbc_deliver_events(c);
	return n;
}
