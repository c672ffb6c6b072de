/*
 * random.h - unguessable tokens: lowercase hex of operating-system
 * randomness (getrandom), drawn from a small pool so that a token costs no
 * system call. The pool is process memory only; each byte is used once.
 */
#ifndef LB_BROKER_BASE_RANDOM_H
#define LB_BROKER_BASE_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Fills buf with 2*n lowercase hex characters (n <= 64) plus a NUL. */
void random_hex(char *buf, size_t n);
/* A number in 0..n-1 (0 when n <= 1), for jitter: not for secrets. */
uint32_t random_below(uint32_t n);

#endif
