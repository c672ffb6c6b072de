/*
 * slot.c - the Redis Cluster hash slot of a key (see slot.h). Bitwise, no
 * table: lock keys are short, and this stays obviously the spec's CRC.
 */
#include "broker/store/slot.h"

#include <string.h>

uint16_t slot_crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t k = 0; k < len; k++) {
		crc ^= (uint16_t)((uint16_t)(unsigned char)buf[k] << 8);
		for (int bit = 0; bit < 8; bit++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

uint16_t slot_of_key(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);
	const char *close;

	if (open) {
		size_t after = len - (size_t)(open + 1 - key);
		close = memchr(open + 1, '}', after);
		if (close && close > open + 1)
			return slot_crc16(open + 1, (size_t)(close - open - 1)) & (SLOT_COUNT - 1);
	}
	return slot_crc16(key, len) & (SLOT_COUNT - 1);
}
