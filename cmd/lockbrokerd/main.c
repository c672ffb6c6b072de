/*
 * lockbrokerd - the lock broker daemon: reads its settings, runs the
 * broker's event loop until a graceful shutdown, frees everything, exits.
 * Exit status: 0 after a clean stop, 1 when it could not start, 2 for bad
 * flags or config.
 */
#include <stdio.h>
#include <stdlib.h>

#include <uv.h>

#include "broker/broker.h"
#include "broker/config.h"

int main(int argc, char **argv)
{
	lb_config_t cfg;
	char err[512];
	uv_loop_t loop;
	int rc;

	rc = config_load(&cfg, argc, argv, err, sizeof(err));
	if (rc != CONFIG_OK) {
		if (rc == CONFIG_ERROR)
			fprintf(stderr, "lockbrokerd: %s\n(see lockbrokerd --help)\n", err);
		config_free(&cfg);
		return rc == CONFIG_EXIT ? 0 : 2;
	}
	uv_loop_init(&loop);
	rc = broker_start(&loop, &cfg, argc, argv);
	uv_run(&loop, UV_RUN_DEFAULT);
	broker_free();
	if (uv_loop_close(&loop) != 0)
		fprintf(stderr, "lockbrokerd: handles still open at exit\n");
	config_free(&cfg);
	return rc == 0 ? 0 : 1;
}
