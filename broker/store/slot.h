/*
 * slot.h - the Redis Cluster hash slot of a key (issue 17): CRC16 (XMODEM:
 * polynomial 0x1021, initial 0, as in the cluster spec) of the key's hash
 * tag, modulo 16384. The hash tag is what lies between the first '{' and
 * the first '}' after it, when that is not empty; otherwise the whole key.
 * Every key of a lock shares the tag {NAME}, so a lock lives in one slot.
 */
#ifndef LB_BROKER_STORE_SLOT_H
#define LB_BROKER_STORE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384

/* CRC16-XMODEM of buf. */
uint16_t slot_crc16(const char *buf, size_t len);

/* The slot Redis Cluster gives key (CLUSTER KEYSLOT). */
uint16_t slot_of_key(const char *key, size_t len);

#endif
