/* The C side of interop_snapshot_pickle (tests/interop/zt_memory_snapshot_test.py
 * reads what this writes with Python's pickle):
 *   DIR/values.pickle    the pickle writer's edge values: ints at the
 *                        BININT/LONG1 boundaries, 64-bit addresses with the
 *                        top bit set, floats, bools, None, empty containers,
 *                        UTF-8 strings;
 *   DIR/ring.pickle      a CPU zt_mem snapshot after a scripted run of
 *                        allocations with a ring of 4 events (so it wraps);
 * and, checked here, a write into a missing directory fails with ZT_ERR_IO
 * and leaves neither the file nor its .tmp. Exit 0 when all went as planned. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "zt_mem.h"
#include "zt_pickle.h"

static int write_values(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    zt_pickle_begin(f);
    zt_pickle_list_open(f);
    const int64_t ints[] = {0, 1, -1, 255, 256, 65535, 65536, INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
                            (int64_t)INT32_MIN - 1, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) zt_pickle_int(f, ints[i]);
    zt_pickle_uint(f, UINT64_MAX);
    zt_pickle_uint(f, (uint64_t)1 << 63);
    zt_pickle_uint(f, 0x00007f0012345678ull);
    zt_pickle_float(f, 0.5), zt_pickle_float(f, -1e300);
    zt_pickle_bool(f, 1), zt_pickle_bool(f, 0), zt_pickle_none(f);
    zt_pickle_dict_open(f), zt_pickle_dict_close(f);
    zt_pickle_list_open(f), zt_pickle_list_close(f);
    zt_pickle_str(f, ""), zt_pickle_str(f, "block3 acts \xc3\xa9");
    zt_pickle_dict_open(f);
    zt_pickle_key(f, "a"), zt_pickle_int(f, 1);
    zt_pickle_key(f, "b"), zt_pickle_list_open(f), zt_pickle_str(f, "x"), zt_pickle_list_close(f);
    zt_pickle_dict_close(f);
    zt_pickle_list_close(f);
    zt_pickle_end(f);
    return fclose(f) != 0;
}

/* Three allocations, one freed: 3 allocs + 2 frees' events + segment events
 * pass through a ring of 4. */
static int write_ring(const char *path) {
    zt_mem m;
    zt_error err = {0};
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 0);
    zt_block *a, *b, *c;
    int bad = zt_mem_trace_enable(&m, 4, &err) != ZT_OK;
    bad |= zt_mem_alloc(&m, 1000, ZT_CAT_PARAMS, "block0 params", &a, &err) != ZT_OK;
    zt_mem_set_phase(&m, ZT_PHASE_FORWARD);
    bad |= zt_mem_alloc(&m, 3000, ZT_CAT_ACTIVATIONS, "block3 acts", &b, &err) != ZT_OK;
    zt_mem_free(&m, b);
    bad |= zt_mem_alloc(&m, 5000, ZT_CAT_GATHERED_PARAMS, "block1 gathered", &c, &err) != ZT_OK;
    bad |= zt_mem_snapshot_write(&m, 0, path, &err) != ZT_OK;
    if (bad) fprintf(stderr, "ring: %s\n", err.msg);
    zt_mem_free(&m, a), zt_mem_free(&m, c);
    zt_mem_destroy(&m);
    return bad;
}

static int refuse_missing_dir(const char *dir) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/missing/rank0.pickle", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    zt_mem m;
    zt_error err = {0};
    zt_mem_init(&m, "device", zt_raw_allocator_cpu(), 0);
    int bad = zt_mem_trace_enable(&m, 8, &err) != ZT_OK;
    zt_status st = zt_mem_snapshot_write(&m, 0, path, &err);
    bad |= st != ZT_ERR_IO || !strstr(err.msg, "missing") || access(path, F_OK) == 0 || access(tmp, F_OK) == 0;
    if (bad) fprintf(stderr, "missing dir: status %d, message '%s'\n", (int)st, err.msg);
    zt_mem_destroy(&m);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char values[1024], ring[1024];
    snprintf(values, sizeof values, "%s/values.pickle", argv[1]);
    snprintf(ring, sizeof ring, "%s/ring.pickle", argv[1]);
    int bad = write_values(values);
    bad |= write_ring(ring);
    bad |= refuse_missing_dir(argv[1]);
    return bad;
}
