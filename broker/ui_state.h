/*
 * ui_state.h - the JSON behind the metrics listener's /ui page
 * (GET /ui/state): what this broker's sessions hold and wait for, Redis
 * and the store, and the per-second series of the last minutes
 * (locks/lockstat.h). README.md ("The UI") documents the schema.
 *
 * Bounded: the top UI_STATE_LOCKS locks (by holders plus waiters here,
 * then grant rate, then name), UI_STATE_SHOWN holders and waiters shown
 * per lock, names cut at UI_STATE_NAME_BYTES and labels at
 * UI_STATE_LABEL_BYTES (at a UTF-8 boundary), and the whole text at most
 * UI_STATE_MAX_BYTES (locks dropped from the end past that, "truncated").
 * Lock names and client labels are shown; lease tokens (and a waiter's
 * id, its token to be) never.
 */
#ifndef LB_BROKER_UI_STATE_H
#define LB_BROKER_UI_STATE_H

#include <stddef.h>
#include <uv.h>

#define UI_STATE_LOCKS 50
#define UI_STATE_SHOWN 4
#define UI_STATE_HOT 10
#define UI_STATE_NAME_BYTES 256
#define UI_STATE_LABEL_BYTES 128
#define UI_STATE_MAX_BYTES (256 * 1024)
/* A render is reused this long: many open pages cost one render. A
 * render that took longer than UI_STATE_REUSE_MS / UI_STATE_LOOP_SHARE
 * (many leases) is reused UI_STATE_LOOP_SHARE times as long as it took,
 * so that renders, asked for as often as anyone likes, take at most
 * 1/UI_STATE_LOOP_SHARE of the loop. */
#define UI_STATE_REUSE_MS 250
#define UI_STATE_LOOP_SHARE 20

/* Starts the per-second sampling (lockstat_start). */
void ui_state_start(uv_loop_t *loop);
/* Stops it and frees the last render. */
void ui_state_stop(void);
/* The state as JSON text, *len bytes (at most UI_STATE_MAX_BYTES); owned
 * here, valid until the next call. */
const char *ui_state_render(size_t *len);

#endif
