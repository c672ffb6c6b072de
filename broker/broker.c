/*
 * broker.c - the broker's lifecycle: start, signals, graceful shutdown.
 *
 * Shutdown (SIGTERM/SIGINT): RUNNING -> DRAINING: listeners close, every
 * session gets {"event":"shutdown","grace_ms":G}, new acquires answer
 * shutting_down; the metrics listener stays, so /readyz says 503 while the
 * broker drains. After G ms, or as soon as no session is left, STOPPING:
 * the remaining sessions get {"event":"closing","reason":"shutdown"} and
 * are closed (their leases released, pipelined), the Redis pool
 * disconnects after its pending replies, and every handle is closed so
 * uv_run returns. A second signal exits at once.
 */
#include "broker/broker.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/base/log.h"
#include "broker/base/random.h"
#include "broker/base/sdnotify.h"
#include "broker/base/shared.h"
#include "broker/base/timers.h"
#include "broker/base/version.h"
#include "broker/locks/lease.h"
#include "broker/locks/waitq.h"
#include "broker/locks/watch.h"
#include "broker/locks/watchdog.h"
#include "broker/metrics.h"
#include "broker/net/dispatch.h"
#include "broker/net/listener.h"
#include "broker/net/session.h"
#include "broker/store/scripts.h"
#include "broker/store/store.h"
#include "protocol/resp.h"

/* What only the lifecycle needs (everything read elsewhere is in
 * base/shared.h). */
static struct {
	int argc; /* the command line, to read the settings again on SIGHUP */
	char **argv;
	timer_ent_t grace; /* the shutdown grace period */
	uv_signal_t sigterm, sigint, sighup;
	/* Output queued in a loop turn is written before the loop blocks again:
	 * prepare covers timer callbacks, check covers I/O callbacks. */
	uv_prepare_t flush_prepare;
	uv_check_t flush_check;
} B;

/* The Redis calls and the client output of the loop turn go out. Writing
 * to clients may resume parked requests, which make calls, whose failures
 * may wake more: a few rounds, then the next turn's flush. */
static void flush_turn(void)
{
	for (int k = 0; k < 8; k++) {
		store_flush();
		session_flush_dirty();
		if (!store_flush_pending())
			break;
	}
}

static void on_flush_prepare(uv_prepare_t *h)
{
	(void)h;
	flush_turn();
}

static void on_flush_check(uv_check_t *h)
{
	(void)h;
	flush_turn();
}

/* Lets the loop end once what is left (Redis replies, session closes) is
 * done; the timers still fire meanwhile. broker_free closes the rest. */
static void close_loop_handles(void)
{
	flush_turn();
	uv_close((uv_handle_t *)&B.sigterm, NULL);
	uv_close((uv_handle_t *)&B.sigint, NULL);
	uv_close((uv_handle_t *)&B.sighup, NULL);
	timers_unref();
}

static void finish(void)
{
	session_t *s, *next;

	if (server.state == BROKER_STOPPING)
		return;
	server.state = BROKER_STOPPING;
	timer_cancel(&B.grace);
	for (s = session_first(); s; s = next) {
		next = s->next;
		if (session_open(s))
			session_end_with(s, "shutdown");
		else
			session_close(s, "broker stopping");
	}
	store_close();
	metrics_close();
	close_loop_handles();
	LOG(LOG_INFO, "msg=\"stopped\"");
}

static void on_grace(timer_ent_t *t)
{
	(void)t;
	LOG(LOG_INFO, "msg=\"shutdown grace over\" sessions=%zu", server.nsessions);
	finish();
}

/* A session finished closing: the last one ends a shutdown. */
static void on_session_gone(void)
{
	if (server.state == BROKER_DRAINING && server.nsessions == 0)
		finish();
}

void broker_shutdown(void)
{
	if (server.state != BROKER_RUNNING)
		return;
	server.state = BROKER_DRAINING;
	sdnotify("STOPPING=1");
	LOG(LOG_INFO, "msg=\"shutting down\" grace_ms=%lld sessions=%zu",
	    (long long)server.cfg->shutdown_grace_ms, server.nsessions);
	listeners_close();
	for (session_t *s = session_first(); s; s = s->next) {
		session_send(s, resp_event_shutdown(server.cfg->shutdown_grace_ms));
		waitq_client_shutdown(&s->lk);
	}
	if (server.nsessions == 0) {
		finish();
		return;
	}
	timer_at(&B.grace, timers_now() + (uint64_t)server.cfg->shutdown_grace_ms);
}

static void on_signal(uv_signal_t *h, int signum)
{
	(void)h;
	if (server.state != BROKER_RUNNING) {
		LOG(LOG_WARN, "msg=\"second signal: exiting now\" signal=%d", signum);
		_exit(1);
	}
	LOG(LOG_INFO, "msg=\"signal received\" signal=%d", signum);
	broker_shutdown();
}

/* SIGHUP: read the config file and flags again and apply what is safe. The
 * log goes to stderr, which the service manager owns: nothing to reopen. */
static void on_sighup(uv_signal_t *h, int signum)
{
	lb_config_t fresh;
	char err[512], restart[256];

	(void)h;
	(void)signum;
	if (config_load(&fresh, B.argc, B.argv, err, sizeof(err)) != CONFIG_OK) {
		LOG(LOG_WARN, "msg=\"reload failed; the running settings stay\" err=\"%s\"", err);
		config_free(&fresh);
		return;
	}
	config_apply_reload(server.cfg, &fresh, restart, sizeof(restart));
	config_free(&fresh);
	log_threshold = server.cfg->log_level;
	log_json = server.cfg->log_json;
	LOG(LOG_INFO, "msg=\"settings reloaded\"");
	if (restart[0])
		LOG(LOG_WARN, "msg=\"changed settings need a restart; not applied\" settings=\"%s\"", restart);
}

/* Redis may have lost data (the canary key, a new run_id on reconnect, a
 * failover): every lease is checked now (those gone are reported lost at
 * once, not at their next renewal; count changes Redis missed are
 * replayed) and every waiting lock heartbeats, so waiters Redis forgot
 * are queued again. After a failover or a restart the store serves
 * nothing else until the leases are checked (store_loss_checked). */
static void on_data_loss(const char *why)
{
	LOG(LOG_WARN, "msg=\"redis may have lost data; checking every lease and waiter\" why=\"%s\"", why);
	bool failover = strcmp(why, STORE_LOSS_FAILOVER) == 0;
	bool gated = failover || strcmp(why, STORE_LOSS_RESTART) == 0;

	watchdog_verify_all(gated, failover, store_loss_checked);
	waitq_on_subscribed();
	watch_read_all(true); /* each watch: one `changed`, read afresh */
	if (gated) {
		/* Releases the new master (or the restarted Redis) may have
		 * missed: their holders would keep the locks, for nobody, until
		 * their TTL. */
		size_t n = lease_release_recent_again();
		if (n)
			LOG(LOG_INFO, "msg=\"recent releases sent again\" releases=%zu", n);
	}
}

/* A message on this broker's notice channel: a lock's waiters may be
 * granted (its name), or a watched lock changed ("\1" NAME). */
static void on_store_message(const char *msg, size_t len)
{
	if (len > 0 && msg[0] == '\1')
		watch_noticed(msg + 1, len - 1);
	else
		waitq_on_message(msg, len);
}

/* The subscription came back: messages may have been missed. */
static void on_resubscribed(void)
{
	waitq_on_subscribed();
	watch_read_all(false);
}

static void on_redis_up(void)
{
	static bool told;

	LOG(LOG_INFO, "msg=\"ready\" broker=%s", server.id);
	watch_read_all(true); /* Redis came back: each watch, one `changed` */
	if (!told) {
		/* Listening and Redis answers: what systemd waits for. */
		told = true;
		sdnotify("READY=1");
	}
}

int broker_start(uv_loop_t *loop, lb_config_t *cfg, int argc, char **argv)
{
	memset(&server, 0, sizeof(server));
	memset(&B, 0, sizeof(B));
	server.loop = loop;
	server.cfg = cfg;
	B.argc = argc;
	B.argv = argv;
	server.state = BROKER_RUNNING;
	random_hex(server.id, 8);
	log_threshold = cfg->log_level;
	log_json = cfg->log_json;
	scripts_init();
	timers_init(loop);
	server.started_ms = timers_now();
	timer_init(&B.grace, on_grace);

	signal(SIGPIPE, SIG_IGN);
	uv_signal_init(loop, &B.sigterm);
	uv_signal_init(loop, &B.sigint);
	uv_signal_start(&B.sigterm, on_signal, SIGTERM);
	uv_signal_start(&B.sigint, on_signal, SIGINT);
	uv_signal_init(loop, &B.sighup);
	uv_signal_start(&B.sighup, on_sighup, SIGHUP);

	uv_prepare_init(loop, &B.flush_prepare);
	uv_prepare_start(&B.flush_prepare, on_flush_prepare);
	uv_unref((uv_handle_t *)&B.flush_prepare);
	uv_check_init(loop, &B.flush_check);
	uv_check_start(&B.flush_check, on_flush_check);
	uv_unref((uv_handle_t *)&B.flush_check);

	/* The wiring: what each layer reports upward goes to the one above. */
	{
		session_hooks_t hooks = {dispatch_line, dispatch_resume, dispatch_session_end,
		                         dispatch_answered, on_session_gone};
		client_set_ops(&session_client_ops);
		session_set_hooks(&hooks);
		lease_set_grants_sink(waitq_take_grants);
	}
	if (listeners_open(loop) < 0 ||
	    (cfg->has_metrics && metrics_listen(loop, &cfg->metrics) < 0)) {
		listeners_close();
		close_loop_handles();
		return -1;
	}
	{
		store_events_t ev = {on_redis_up, on_data_loss, on_store_message, on_resubscribed};
		store_start(loop, cfg, &ev);
	}
	LOG(LOG_INFO, "msg=\"started\" version=%s broker=%s pool=%d", LOCKBROKER_VERSION, server.id,
	    cfg->pool);
	return 0;
}

void broker_free(void)
{
	flush_turn();
	uv_close((uv_handle_t *)&B.flush_prepare, NULL);
	uv_close((uv_handle_t *)&B.flush_check, NULL);
	timers_close();
	uv_run(server.loop, UV_RUN_DEFAULT); /* the close callbacks */
	session_flush_list_free();
	lease_table_free();
	waitq_free();
	watch_free();
	dispatch_free();
	store_free();
}
