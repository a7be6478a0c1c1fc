/* The pickle subset of zt_pickle.h. Opcodes and encodings are protocol 2's
 * (Python's Lib/pickletools.py documents each). */
#include "zt_pickle.h"

#include <string.h>

enum {
    OP_PROTO = 0x80, OP_STOP = '.', OP_MARK = '(', OP_EMPTY_DICT = '}', OP_SETITEMS = 'u',
    OP_EMPTY_LIST = ']', OP_APPENDS = 'e', OP_BINUNICODE = 'X', OP_BININT = 'J', OP_LONG1 = 0x8a,
    OP_BINFLOAT = 'G', OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_NONE = 'N',
};

static void put(FILE *f, int byte) { (void)fputc(byte, f); }

/* n bytes of v, least significant first (BININT, LONG1, BINUNICODE's length). */
static void put_le(FILE *f, uint64_t v, int n) {
    for (int i = 0; i < n; i++) put(f, (int)((v >> (8 * i)) & 0xff));
}

void zt_pickle_begin(FILE *f) { put(f, OP_PROTO), put(f, 2); }
void zt_pickle_end(FILE *f) { put(f, OP_STOP); }
void zt_pickle_dict_open(FILE *f) { put(f, OP_EMPTY_DICT), put(f, OP_MARK); }
void zt_pickle_dict_close(FILE *f) { put(f, OP_SETITEMS); }
void zt_pickle_list_open(FILE *f) { put(f, OP_EMPTY_LIST), put(f, OP_MARK); }
void zt_pickle_list_close(FILE *f) { put(f, OP_APPENDS); }
void zt_pickle_none(FILE *f) { put(f, OP_NONE); }
void zt_pickle_bool(FILE *f, int v) { put(f, v ? OP_NEWTRUE : OP_NEWFALSE); }

void zt_pickle_str(FILE *f, const char *s) {
    size_t n = strlen(s);
    put(f, OP_BINUNICODE);
    put_le(f, (uint64_t)n, 4); /* our strings are labels and names: far below 4 GiB */
    (void)fwrite(s, 1, n, f);
}

void zt_pickle_key(FILE *f, const char *key) { zt_pickle_str(f, key); }

void zt_pickle_int(FILE *f, int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
        put(f, OP_BININT);
        put_le(f, (uint64_t)(uint32_t)(int32_t)v, 4);
        return;
    }
    put(f, OP_LONG1); /* two's complement, little-endian, 8 bytes hold any int64 */
    put(f, 8);
    put_le(f, (uint64_t)v, 8);
}

void zt_pickle_uint(FILE *f, uint64_t v) {
    if (v <= (uint64_t)INT64_MAX) {
        zt_pickle_int(f, (int64_t)v);
        return;
    }
    put(f, OP_LONG1); /* a ninth, zero byte keeps the top bit from reading as a sign */
    put(f, 9);
    put_le(f, v, 8);
    put(f, 0);
}

void zt_pickle_float(FILE *f, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    put(f, OP_BINFLOAT); /* IEEE 754 double, big-endian */
    for (int i = 7; i >= 0; i--) put(f, (int)((bits >> (8 * i)) & 0xff));
}
