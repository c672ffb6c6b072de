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

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "broker/canary.h"
#include "broker/dispatch.h"
#include "broker/lease.h"
#include "broker/listener.h"
#include "broker/log.h"
#include "broker/metrics.h"
#include "broker/rpool.h"
#include "broker/scripts.h"
#include "broker/sdnotify.h"
#include "broker/session.h"
#include "broker/waitq.h"
#include "broker/watchdog.h"
#include "protocol/resp.h"

struct broker server;

/* Random bytes come from getrandom in blocks, not one call per token: a
 * syscall per acquire was a tenth of the broker's syscalls. The pool is
 * process memory only; each byte is handed out once. */
void broker_random_hex(char *buf, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	static unsigned char pool[1024];
	static size_t left;
	const unsigned char *raw;

	REQUIRE(n <= 64);
	if (left < n) {
		size_t got = 0;

		while (got < sizeof(pool)) {
			ssize_t r = getrandom(pool + got, sizeof(pool) - got, 0);
			if (r < 0) {
				REQUIRE(errno == EINTR);
				continue;
			}
			got += (size_t)r;
		}
		left = sizeof(pool);
	}
	raw = pool + sizeof(pool) - left;
	left -= n;
	for (size_t k = 0; k < n; k++) {
		buf[2 * k] = hex[raw[k] >> 4];
		buf[2 * k + 1] = hex[raw[k] & 15];
	}
	buf[2 * n] = '\0';
}

static void on_flush_prepare(uv_prepare_t *h)
{
	(void)h;
	session_flush_dirty();
}

static void on_flush_check(uv_check_t *h)
{
	(void)h;
	session_flush_dirty();
}

/* Lets the loop end once what is left (Redis replies, session closes) is
 * done; the timers still fire meanwhile. broker_free closes the rest. */
static void close_loop_handles(void)
{
	session_flush_dirty();
	uv_close((uv_handle_t *)&server.sigterm, NULL);
	uv_close((uv_handle_t *)&server.sigint, NULL);
	uv_close((uv_handle_t *)&server.sighup, NULL);
	timers_unref();
}

static void finish(void)
{
	session_t *s, *next;

	if (server.state == BROKER_STOPPING)
		return;
	server.state = BROKER_STOPPING;
	timer_cancel(&server.grace);
	for (s = server.sessions; s; s = next) {
		next = s->next;
		if (session_open(s))
			session_end_with(s, "shutdown");
		else
			session_close(s, "broker stopping");
	}
	canary_stop();
	rpool_close();
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

void broker_session_gone(void)
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
	for (session_t *s = server.sessions; s; s = s->next)
		session_send(s, resp_event_shutdown(server.cfg->shutdown_grace_ms));
	waitq_shutdown();
	if (server.nsessions == 0) {
		finish();
		return;
	}
	timer_at(&server.grace, timers_now() + (uint64_t)server.cfg->shutdown_grace_ms);
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
	if (config_load(&fresh, server.argc, server.argv, err, sizeof(err)) != CONFIG_OK) {
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

/* Redis may have lost data (the canary key, or a new run_id on
 * reconnect): every lease is checked now (those gone are reported lost at
 * once, not at their next renewal) and every waiting lock heartbeats, so
 * waiters Redis forgot are queued again. */
static void on_data_loss(const char *why)
{
	LOG(LOG_WARN, "msg=\"redis may have lost data; checking every lease and waiter\" why=\"%s\"", why);
	watchdog_verify_all();
	waitq_on_subscribed();
}

static void on_redis_up(void)
{
	static bool told;

	LOG(LOG_INFO, "msg=\"ready\" broker=%s", server.id);
	if (!told) {
		/* Listening and Redis answers: what systemd waits for. */
		told = true;
		sdnotify("READY=1");
	}
}

int broker_start(uv_loop_t *loop, lb_config_t *cfg, int argc, char **argv)
{
	memset(&server, 0, sizeof(server));
	server.loop = loop;
	server.cfg = cfg;
	server.argc = argc;
	server.argv = argv;
	server.state = BROKER_RUNNING;
	broker_random_hex(server.id, 8);
	log_threshold = cfg->log_level;
	log_json = cfg->log_json;
	scripts_init();
	timers_init(loop);
	server.started_ms = timers_now();
	timer_init(&server.grace, on_grace);

	signal(SIGPIPE, SIG_IGN);
	uv_signal_init(loop, &server.sigterm);
	uv_signal_init(loop, &server.sigint);
	uv_signal_start(&server.sigterm, on_signal, SIGTERM);
	uv_signal_start(&server.sigint, on_signal, SIGINT);
	uv_signal_init(loop, &server.sighup);
	uv_signal_start(&server.sighup, on_sighup, SIGHUP);

	uv_prepare_init(loop, &server.flush_prepare);
	uv_prepare_start(&server.flush_prepare, on_flush_prepare);
	uv_unref((uv_handle_t *)&server.flush_prepare);
	uv_check_init(loop, &server.flush_check);
	uv_check_start(&server.flush_check, on_flush_check);
	uv_unref((uv_handle_t *)&server.flush_check);

	if (listeners_open(loop) < 0 ||
	    (cfg->has_metrics && metrics_listen(loop, &cfg->metrics) < 0)) {
		listeners_close();
		close_loop_handles();
		return -1;
	}
	{
		char channel[128];
		rpool_inbox_t inbox = {channel, waitq_on_message, waitq_on_subscribed};
		/* The same name lua/lib/prelude.lua publishes wake-ups to. */
		snprintf(channel, sizeof(channel), "%sinbox:%s", cfg->prefix, server.id);
		rpool_callbacks_t cb = {on_redis_up, on_data_loss};
		char name[64];
		snprintf(name, sizeof(name), "lockbroker-%s", server.id);
		rpool_init(loop, &cfg->redis, cfg->pool, name, &cb, &inbox);
	}
	canary_start(on_data_loss);
	LOG(LOG_INFO, "msg=\"started\" version=%s broker=%s pool=%d", LOCKBROKER_VERSION, server.id,
	    cfg->pool);
	return 0;
}

void broker_free(void)
{
	session_flush_dirty();
	uv_close((uv_handle_t *)&server.flush_prepare, NULL);
	uv_close((uv_handle_t *)&server.flush_check, NULL);
	timers_close();
	uv_run(server.loop, UV_RUN_DEFAULT); /* the close callbacks */
	session_flush_list_free();
	lease_table_free();
	waitq_free();
	dispatch_free();
	rpool_free();
}
