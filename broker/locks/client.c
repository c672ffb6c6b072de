/* client.c - the net layer's functions behind client.h, set at start. */
#include "broker/locks/client.h"

client_ops_t client_ops;

void client_set_ops(const client_ops_t *ops)
{
	client_ops = *ops;
}
