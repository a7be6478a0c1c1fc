/* The host-staging communicator (comm/comm_staged.c) under mpirun: the
 * values of its all-gathers and reduce-scatters, and its pool of pinned
 * staging buffers. The steps repeat the collectives of a sharded step, two
 * of them in flight at once, needing more staging than the pool's floor
 * (1 MiB here, so the test stays small); then a second pattern with a larger
 * bucket. From each pattern's third step on no new pinned buffer may be
 * allocated (a pool capped at its floor freed and pinned the largest again
 * every step), and what stays pinned is at most 1.25 x what the collectives
 * in flight together ask for (a pool that kept every buffer would not be).
 *   launch/zt-run -np 3 build-emu/tests/test_staged_pool
 * Exit code 77 (skipped) without a CUDA device. */
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "comm_cuda.h"

#define STEPS_A 6
#define STEPS_B 4
#define FLOOR_BYTES ((size_t)1 << 20)

/* Values every rank can compute for every rank: exact in fp32. */
static float rs_value(int rank, size_t i) { return (float)((int)(i % 1021) - 510) * 0.25f + (float)rank; }
static unsigned char ag_byte(int rank, size_t i) { return (unsigned char)(rank * 37 + i * 11 + 5); }

typedef struct {
    size_t bytes_per_rank;
    void *recv; /* device [N * bytes_per_rank] */
    zt_comm_handle h;
} ag_call;

typedef struct {
    size_t count;
    float *send, *staging, *out; /* device [N * count], [N * count], [count] */
    zt_comm_handle h;
} rs_call;

static int dev_alloc(void **p, size_t bytes) { return cudaMalloc(p, bytes) == cudaSuccess; }

/* Host staging of a reduce-scatter: send, received chunks and sum. */
static size_t rs_staging(size_t N, size_t count) { return (2 * N + 1) * count * sizeof(float); }

static void ag_start(zt_comm *c, ag_call *a, zt_error *err) {
    size_t n = a->bytes_per_rank;
    unsigned char *mine = xmalloc(n);
    for (size_t i = 0; i < n; i++) mine[i] = ag_byte(c->rank, i);
    CHECK(cudaMemset(a->recv, 0, n * (size_t)c->world_size) == cudaSuccess, "cudaMemset");
    CHECK(cudaMemcpy((char *)a->recv + (size_t)c->rank * n, mine, n, cudaMemcpyHostToDevice) == cudaSuccess,
          "cudaMemcpy");
    free(mine);
    CHECK(zt_comm_all_gather_start(c, NULL, a->recv, n, NULL, &a->h, err) == ZT_OK, "all_gather_start: %s",
          err->msg);
}

static void ag_finish(zt_comm *c, ag_call *a, zt_error *err) {
    size_t n = a->bytes_per_rank, total = n * (size_t)c->world_size;
    CHECK(zt_comm_wait(c, &a->h, err) == ZT_OK, "wait (all-gather): %s", err->msg);
    unsigned char *got = xmalloc(total);
    CHECK(cudaMemcpy(got, a->recv, total, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy");
    size_t bad = 0;
    for (int r = 0; r < c->world_size; r++)
        for (size_t i = 0; i < n; i++) bad += got[(size_t)r * n + i] != ag_byte(r, i);
    CHECK(bad == 0, "all-gather of %zu bytes per rank: %zu wrong bytes", n, bad);
    free(got);
}

static void rs_start(zt_comm *c, rs_call *q, zt_error *err) {
    size_t N = (size_t)c->world_size, total = N * q->count;
    float *send = xmalloc(total * sizeof *send);
    /* Chunk r goes to rank r; every rank sends rs_value(its rank, global index). */
    for (size_t i = 0; i < total; i++) send[i] = rs_value(c->rank, i);
    CHECK(cudaMemcpy(q->send, send, total * sizeof *send, cudaMemcpyHostToDevice) == cudaSuccess, "cudaMemcpy");
    free(send);
    CHECK(zt_comm_reduce_scatter_start(c, q->send, q->staging, q->out, q->count, zt_wire_plain(ZT_FP32), NULL, &q->h, err) == ZT_OK,
          "reduce_scatter_start: %s", err->msg);
}

static void rs_finish(zt_comm *c, rs_call *q, zt_error *err) {
    CHECK(zt_comm_wait(c, &q->h, err) == ZT_OK, "wait (reduce-scatter): %s", err->msg);
    float *got = xmalloc(q->count * sizeof *got);
    CHECK(cudaMemcpy(got, q->out, q->count * sizeof *got, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy");
    size_t bad = 0;
    for (size_t i = 0; i < q->count; i++) {
        size_t g = (size_t)c->rank * q->count + i;
        float want = 0.0f;
        for (int r = 0; r < c->world_size; r++) want += rs_value(r, g); /* rank order */
        bad += memcmp(&got[i], &want, sizeof want) != 0;
    }
    CHECK(bad == 0, "reduce-scatter of %zu floats per rank: %zu wrong values", q->count, bad);
    free(got);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device\n");
        MPI_Finalize();
        return 77;
    }
    zt_error err = {0};
    zt_comm c;
    if (zt_comm_staged_create(&c, FLOOR_BYTES, &err) != ZT_OK) {
        printf("FAIL: zt_comm_staged_create: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t N = (size_t)c.world_size;
    /* Phase A, steps 1-6: a large unit gathered, two gradient buckets
     * reduced at once, a small unit gathered. Phase B, steps 7-10: the
     * small gather and one larger bucket alone. */
    ag_call big = {.bytes_per_rank = 400000 + 17}, small = {.bytes_per_rank = 3000};
    rs_call b1 = {.count = 70000}, b2 = {.count = 41000 + 3}, b3 = {.count = 150000};
    /* The most staging requested at once, per phase. */
    size_t need_a = rs_staging(N, b1.count) + rs_staging(N, b2.count);
    if (N * big.bytes_per_rank > need_a) need_a = N * big.bytes_per_rank;
    size_t need_b = rs_staging(N, b3.count);
    int ok = dev_alloc(&big.recv, N * big.bytes_per_rank) && dev_alloc(&small.recv, N * small.bytes_per_rank);
    rs_call *buckets[3] = {&b1, &b2, &b3};
    for (int k = 0; k < 3 && ok; k++) {
        rs_call *q = buckets[k];
        ok = dev_alloc((void **)&q->send, N * q->count * sizeof(float)) &&
             dev_alloc((void **)&q->staging, N * q->count * sizeof(float)) &&
             dev_alloc((void **)&q->out, q->count * sizeof(float));
    }
    CHECK(ok, "cudaMalloc of the test's buffers");
    CHECK(need_a > 2 * FLOOR_BYTES && need_b > need_a, "sizes: phase A needs %zu bytes, B %zu", need_a, need_b);
    unsigned long long allocs_after[STEPS_A + STEPS_B] = {0};
    for (int step = 0; step < STEPS_A + STEPS_B && ok; step++) {
        size_t need = need_a;
        if (step < STEPS_A) {
            ag_start(&c, &big, &err);
            ag_finish(&c, &big, &err);
            rs_start(&c, &b1, &err);
            rs_start(&c, &b2, &err);
            /* Completed out of order, as buckets may be. */
            rs_finish(&c, &b2, &err);
            rs_finish(&c, &b1, &err);
            ag_start(&c, &small, &err);
            ag_finish(&c, &small, &err);
        } else {
            need = need_b;
            ag_start(&c, &small, &err);
            ag_finish(&c, &small, &err);
            rs_start(&c, &b3, &err);
            rs_finish(&c, &b3, &err);
        }
        allocs_after[step] = c.staging.pinned_allocs;
        /* Pooling hands a request any buffer at least its size, so the
         * pool can hold somewhat more than the requests need; keeping every
         * buffer would hold about 1.7x at the end of phase B. */
        CHECK(c.staging.pinned_bytes <= need + need / 4, "step %d: %zu bytes stay pinned, over 1.25 x the %zu "
              "that the collectives in flight together need", step + 1, c.staging.pinned_bytes, need);
    }
    /* Each phase pins what it needs in its first two steps, then nothing. */
    for (int step = 2; step < STEPS_A + STEPS_B && ok; step++)
        if (step != STEPS_A && step != STEPS_A + 1)
            CHECK(allocs_after[step] == allocs_after[step - 1], "step %d pinned %llu new buffer(s)", step + 1,
                  allocs_after[step] - allocs_after[step - 1]);
    printf("rank %d of %d: %llu pinned allocations (after step %d: %llu), %zu bytes pinned, peak %zu\n", c.rank,
           c.world_size, c.staging.pinned_allocs, STEPS_A, allocs_after[STEPS_A - 1], c.staging.pinned_bytes,
           c.staging.pinned_peak_bytes);
    int rank = c.rank;
    zt_comm_destroy(&c);
    cudaFree(big.recv);
    cudaFree(small.recv);
    for (int k = 0; k < 3; k++) {
        cudaFree(buckets[k]->send);
        cudaFree(buckets[k]->staging);
        cudaFree(buckets[k]->out);
    }
    int failures = g_failures, any = 0;
    MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 || failures) printf("%s: %ld checks, %d failures\n", any ? "FAIL" : "PASS", g_checks, failures);
    MPI_Finalize();
    return any ? 1 : 0;
}
