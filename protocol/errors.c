/*
 * errors.c - wire strings and default messages of the protocol's error codes.
 *
 * Both tables are generated from LB_ERR_MAP in errors.h, so they always have
 * one entry per code, in enum order. Entry i describes code i + 1 (LB_OK, 0,
 * is not an error). Any value outside the map reads as "internal".
 */
#include "protocol/errors.h"

static const char *const err_codes[] = {
#define LB_ERR_CODE(name, code, msg) code,
	LB_ERR_MAP(LB_ERR_CODE)
#undef LB_ERR_CODE
};

static const char *const err_messages[] = {
#define LB_ERR_MSG(name, code, msg) msg,
	LB_ERR_MAP(LB_ERR_MSG)
#undef LB_ERR_MSG
};

_Static_assert(sizeof(err_codes) / sizeof(err_codes[0]) == LB_E__COUNT - 1,
	       "one wire string per error code");

static int err_index(lb_err_t err)
{
	if ((int)err <= (int)LB_OK || (int)err >= (int)LB_E__COUNT)
		err = LB_E_INTERNAL;
	return (int)err - 1;
}

const char *lb_err_code(lb_err_t err)
{
	return err_codes[err_index(err)];
}

const char *lb_err_message(lb_err_t err)
{
	return err_messages[err_index(err)];
}
