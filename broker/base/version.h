/* version.h - the one place the broker's version and protocol version live. */
#ifndef LB_BROKER_VERSION_H
#define LB_BROKER_VERSION_H

#define LOCKBROKER_NAME "lockbroker"
#define LOCKBROKER_VERSION "0.1.0"
#define LB_PROTO_VERSION 1

#endif
