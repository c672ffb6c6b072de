/*
 * ui_assets.h - the files of ui/ (the /ui page: HTML, CSS, JS), embedded
 * into the binary at build time by deploy/embed-ui.sh (build/gen/
 * ui_assets.c), so the broker serves them with no file on disk and no
 * build step beyond that copy. The metrics listener serves ui/NAME at
 * /ui/NAME, and ui/index.html also at /ui and /ui/.
 */
#ifndef LB_BROKER_UI_ASSETS_H
#define LB_BROKER_UI_ASSETS_H

#include <stddef.h>
#include <string.h>

typedef struct ui_asset {
	const char *name; /* "index.html": a file name of ui/ */
	const char *type; /* its Content-Type */
	const unsigned char *data;
	size_t len;
} ui_asset_t;

extern const ui_asset_t ui_assets[];
extern const size_t ui_asset_count;

/* The asset named name (a file name, no '/'), or NULL. */
static inline const ui_asset_t *ui_asset_find(const char *name)
{
	for (size_t k = 0; k < ui_asset_count; k++)
		if (strcmp(ui_assets[k].name, name) == 0)
			return &ui_assets[k];
	return NULL;
}

#endif
