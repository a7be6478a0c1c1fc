/* A streaming writer of the small subset of Python's pickle protocol 2 that
 * a memory snapshot needs: dicts, lists, str, int (any 64-bit value), float,
 * bool and None. zt-train writes PyTorch's memory_viz snapshots itself, so a
 * run needs no Python (docs/interop_memory_viz.md).
 *
 * Containers are written as the opcodes EMPTY_DICT/EMPTY_LIST, MARK, the
 * items, SETITEMS/APPENDS: Python's unpickler reads them without a memo.
 * Each call writes to the FILE; errors are the FILE's (ferror), checked once
 * by the caller at the end, so call sites stay one line each. */
#ifndef ZT_PICKLE_H
#define ZT_PICKLE_H

#include <stdint.h>
#include <stdio.h>

void zt_pickle_begin(FILE *f);     /* PROTO 2 */
void zt_pickle_end(FILE *f);       /* STOP */
void zt_pickle_dict_open(FILE *f); /* then key, value, key, value, ... */
void zt_pickle_dict_close(FILE *f);
void zt_pickle_list_open(FILE *f);
void zt_pickle_list_close(FILE *f);
void zt_pickle_str(FILE *f, const char *s); /* UTF-8 bytes, written as given */
void zt_pickle_int(FILE *f, int64_t v);
void zt_pickle_uint(FILE *f, uint64_t v); /* addresses: all 64 bits, never negative */
void zt_pickle_float(FILE *f, double v);
void zt_pickle_bool(FILE *f, int v);
void zt_pickle_none(FILE *f);
/* A dict entry with a str key, the common case. */
void zt_pickle_key(FILE *f, const char *key);

#endif
