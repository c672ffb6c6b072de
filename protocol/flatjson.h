/*
 * flatjson.h - a fast loader for the flat JSON objects that nearly every
 * request line is, in front of jansson's general parser.
 *
 * flatjson_load() takes one object whose keys and string values are printable
 * ASCII without escapes and whose values are such strings, integers of at
 * most 18 digits, true, false or null. For such a line it returns what
 * json_loadb with req.c's flags (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
 * JSON_DECODE_ANY) returns: the same keys in the same order, the same values
 * and types. For any other line it returns NULL and
 * decides nothing: the caller loads the line with jansson, whose rules then
 * accept or reject it. The caller owns the object it returns.
 */
#ifndef LB_PROTOCOL_FLATJSON_H
#define LB_PROTOCOL_FLATJSON_H

#include <stddef.h>
#include <jansson.h>

json_t *flatjson_load(const char *s, size_t len);

#endif
