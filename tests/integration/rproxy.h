/*
 * rproxy.h - a TCP proxy between a broker and its Redis, run by a test in
 * a thread of its own, that can stall one connection the way a network
 * does: the bytes the broker sends on it are kept back (the broker sees
 * no answer), then delivered late, or the broker's side is cut while the
 * kept bytes still reach Redis afterwards. Connections are known by the
 * name the broker gives them in its handshake (CLIENT SETNAME, e.g.
 * "lockbroker-ID:0"; rpool.h), so a test can stall the one that serves a
 * given lock.
 *
 * One proxy per test process (the tests run one per worker). Not
 * thread-safe beyond the test thread calling these and the proxy's own
 * thread; the calls hand their request over and return once the proxy
 * took it.
 */
#ifndef LB_TESTS_INTEGRATION_RPROXY_H
#define LB_TESTS_INTEGRATION_RPROXY_H

/* Starts the proxy on a free port of 127.0.0.1, to Redis on
 * 127.0.0.1:upstream_port; returns its port. */
int rproxy_start(int upstream_port);
/* Stops it and closes every connection. */
void rproxy_stop(void);
/* Keeps back the bytes sent from now on by the broker on the open
 * connections whose name ends with suffix (NULL: every open one). Those
 * opened later pass. */
void rproxy_hold(const char *suffix);
/* Closes the broker's side of the connections whose name ends with
 * suffix (NULL: the held ones); what a held one kept still goes to Redis
 * at rproxy_release, followed by the end of the connection. */
void rproxy_cut(const char *suffix);
/* Delivers what the held connections kept, and lets them pass again. */
void rproxy_release(void);

#endif
