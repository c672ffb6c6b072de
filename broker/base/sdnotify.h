/*
 * sdnotify.h - the systemd readiness protocol (sd_notify(3)) without
 * libsystemd: one datagram to the Unix socket named by $NOTIFY_SOCKET (a
 * path, or an abstract name written with a leading '@'). Without that
 * variable (not under systemd Type=notify) it does nothing.
 */
#ifndef LB_BROKER_SDNOTIFY_H
#define LB_BROKER_SDNOTIFY_H

/* Sends state (e.g. "READY=1", "STOPPING=1"); returns 0, or -1 (logged). */
int sdnotify(const char *state);

#endif
