/* shared.c - the one instance of the shared state (see shared.h). */
#include "broker/base/shared.h"

struct lb_shared server;
