/* The stream-ordering interface on the CPU backend: every operation has
 * happened when it returns, so events are NULL and waits are no-ops, and a
 * "further" stream runs kernels at once like the default one. The engine
 * calls these on every path, so on the CPU they must neither fail nor
 * change results. (The CUDA side is tested in test_cuda_ops.) */
#include <string.h>

#include "test_util.h"
#include "zt_ctx.h"

int main(void) {
    zt_ctx ctx;
    zt_status st = zt_ctx_init(&ctx, ZT_DEVICE_CPU, 2, 0, 0, 1, 1);
    CHECK(st == ZT_OK, "zt_ctx_init: %s", ctx.err.msg);
    if (st != ZT_OK) return 1;
    zt_backend *be = ctx.be;

    /* The copy streams exist and behave as the compute stream. */
    CHECK(ctx.h2d.be == be && ctx.d2h.be == be, "copy streams belong to the context's backend");
    CHECK(ctx.h2d.nthreads == be->nthreads, "copy streams inherit the thread count");

    void *ev = (void *)&ctx; /* must be overwritten */
    CHECK(zt_event_record(be, &ctx.compute, &ev, &ctx.err) == ZT_OK, "record: %s", ctx.err.msg);
    CHECK(ev == NULL, "a CPU event is NULL (everything has happened)");
    CHECK(zt_stream_wait_event(be, &ctx.h2d, ev, &ctx.err) == ZT_OK, "wait on NULL: %s", ctx.err.msg);
    CHECK(zt_event_sync(be, ev, &ctx.err) == ZT_OK, "sync on NULL: %s", ctx.err.msg);
    CHECK(zt_stream_after(be, &ctx.d2h, &ctx.compute, &ctx.err) == ZT_OK, "stream_after: %s", ctx.err.msg);
    zt_event_destroy(be, NULL);

    /* A created stream runs a kernel and a copy before returning. */
    zt_stream side;
    CHECK(zt_stream_create(be, &side, &ctx.err) == ZT_OK, "stream_create: %s", ctx.err.msg);
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    be->ops->scale(&side, x, 3.0f, 5);
    CHECK(be->memcpy_async(be, y, x, sizeof x, ZT_COPY_D2H, &side, &ctx.err) == ZT_OK, "copy: %s", ctx.err.msg);
    for (int i = 0; i < 5; i++) CHECK(y[i] == 3.0f * (float)(i + 1), "y[%d] = %g", i, (double)y[i]);
    zt_stream_destroy(be, &side);
    CHECK(side.handle == NULL, "a destroyed stream has no handle");

    zt_ctx_destroy(&ctx);
    printf("%ld checks, %d failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
