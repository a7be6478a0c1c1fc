/* The NVMe tier's engine side (ZeRO-Infinity's optimizer and parameter
 * swapping): where each unit's fp32 master, optimizer state and (stage 3)
 * parameter shard lie in the rank's swap file, and how the CPU optimizer
 * streams them through a bounded set of host buffers.
 *
 * File layout: per unit, one region per array (master and the optimizer's
 * slots: [owned] fp32; the parameter shard: [shard] in the params dtype),
 * each starting at a ZT_NVME_ALIGN boundary. The optimizer step walks every
 * unit's owned range in chunks of `chunk` elements ("items", units in
 * order); buffer k of K holds one item: `block_bytes` of each fp32 array
 * and its params. Reads run
 * K - 1 items ahead of the update, across unit boundaries, so the reads of
 * unit u + 1 overlap the update of u; an item's writes go out as soon as it
 * is updated and are waited for only when its buffer is needed again. Host
 * memory holds the K buffers (and, with the parameters in the file, two
 * shard-sized staging buffers for the gathers), never the state.
 *
 * The update is elementwise (an optimizer with a host_range, whose slots
 * are fp32 per element: AdamW, SGD), and the CPU kernels round each
 * element alike whatever the split, so the results are bitwise those of
 * host offload. docs/memory.md, "The NVMe tier", has the sizes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "zt_fs.h"
#include "zt_nvme.h"
#include "zt_time.h"

struct zt_nvme_state {
    zt_nvme_file file;
    size_t (*off)[ZT_NVME_NARRAYS]; /* [nunits][array]: region offsets (SIZE_MAX: none) */
    size_t chunk;                   /* elements per item */
    size_t at[ZT_NVME_NARRAYS];     /* each array's place in a buffer (SIZE_MAX: not streamed) */
    size_t slot_bytes;              /* one buffer */
    int K;
    zt_tensor buffers; /* host pool: K x slot_bytes, plus alignment */
    char *base;        /* the first buffer, ZT_NVME_ALIGN-aligned */
    zt_nvme_ticket *tickets; /* [K]: each buffer's requests in flight */
    int nitems, next_read, next_step;
    int *item_unit;   /* [nitems] */
    size_t *item_lo;  /* [nitems]: first element of the item, relative to the owned range */
    /* Parameters in the file: two staging buffers for the gathers' copies. */
    zt_tensor stage;
    char *stage_at[2];
    void *stage_done[2];
    int stage_slot;
    size_t stage_bytes;
    double wait_s; /* seconds the host waited for I/O */
};

static size_t array_elem_size(const zt_engine *e, zt_nvme_array a) {
    return a == ZT_NVME_PARAMS ? zt_dtype_size(e->cfg.dtype) : sizeof(float);
}

/* Does the optimizer keep array a (the master always; a slot where the
 * optimizer has it)? */
static int optimizer_keeps(const zt_engine *e, zt_nvme_array a) {
    if (a == ZT_NVME_MASTER) return 1;
    return (a == ZT_NVME_SLOT0 || a == ZT_NVME_SLOT1) && (int)(a - ZT_NVME_SLOT0) < optim_of(e)->nslots;
}

/* Elements of array a of unit u in the file (0: not there). */
static size_t region_numel(const zt_engine *e, int u, zt_nvme_array a) {
    if (a == ZT_NVME_PARAMS) return params_in_file(e, u) ? e->spec->units[u].shard_numel : 0;
    return !frozen(e, u) && optimizer_keeps(e, a) ? owned_numel(e, u) : 0;
}

static size_t file_bytes(const zt_engine *e) {
    size_t total = 0;
    for (int u = 0; u < e->spec->nunits; u++)
        for (int a = 0; a < ZT_NVME_NARRAYS; a++)
            total += zt_nvme_round(region_numel(e, u, (zt_nvme_array)a) * array_elem_size(e, (zt_nvme_array)a));
    return total;
}

static zt_status lay_out(zt_engine *e, struct zt_nvme_state *nv) {
    int n = e->spec->nunits;
    nv->off = calloc((size_t)n, sizeof *nv->off);
    if (!nv->off) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "nvme: cannot allocate the layout");
    size_t at = 0;
    for (int u = 0; u < n; u++)
        for (int a = 0; a < ZT_NVME_NARRAYS; a++) {
            size_t bytes = region_numel(e, u, (zt_nvme_array)a) * array_elem_size(e, (zt_nvme_array)a);
            nv->off[u][a] = bytes ? at : SIZE_MAX;
            at += zt_nvme_round(bytes);
        }
    /* A buffer: block_bytes of each fp32 array the optimizer keeps, then the
     * chunk's params when they live in the file. */
    nv->chunk = e->cfg.nvme.block_bytes / sizeof(float);
    nv->slot_bytes = 0;
    for (int a = 0; a < ZT_NVME_NARRAYS; a++) {
        int streamed = a == ZT_NVME_PARAMS ? e->cfg.nvme_params : optimizer_keeps(e, (zt_nvme_array)a);
        nv->at[a] = streamed ? nv->slot_bytes : SIZE_MAX;
        if (streamed) nv->slot_bytes += zt_nvme_round(nv->chunk * array_elem_size(e, (zt_nvme_array)a));
    }
    return ZT_OK;
}

/* The step's items: every trained unit's owned range in chunks. */
static zt_status list_items(zt_engine *e, struct zt_nvme_state *nv) {
    int count = 0;
    for (int u = 0; u < e->spec->nunits; u++)
        if (!frozen(e, u)) count += (int)((owned_numel(e, u) + nv->chunk - 1) / nv->chunk);
    nv->item_unit = malloc(((size_t)count + 1) * sizeof *nv->item_unit);
    nv->item_lo = malloc(((size_t)count + 1) * sizeof *nv->item_lo);
    if (!nv->item_unit || !nv->item_lo) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "nvme: cannot list %d items", count);
    int i = 0;
    for (int u = 0; u < e->spec->nunits; u++)
        for (size_t lo = 0; !frozen(e, u) && lo < owned_numel(e, u); lo += nv->chunk, i++) {
            nv->item_unit[i] = u;
            nv->item_lo[i] = lo;
        }
    nv->nitems = count;
    return ZT_OK;
}

static char *align_up(void *p) {
    return (char *)(((uintptr_t)p + ZT_NVME_ALIGN - 1) / ZT_NVME_ALIGN * ZT_NVME_ALIGN);
}

size_t zt_nvme_buffer_bytes(const zt_model_spec *spec, const zt_engine_config *cfg, size_t *stage_bytes) {
    size_t chunk = cfg->nvme.block_bytes / sizeof(float), d = zt_dtype_size(cfg->dtype), most = 0;
    size_t arrays = 1 + (size_t)zt_optim_or_default(cfg->optimizer)->nslots; /* master and the slots */
    size_t slot = arrays * zt_nvme_round(chunk * sizeof(float)) + (cfg->nvme_params ? zt_nvme_round(chunk * d) : 0);
    for (int u = 0; cfg->nvme_params && u < spec->nunits; u++) {
        const zt_unit_spec *us = &spec->units[u];
        int on_demand = cfg->stage == 3 && !(us->numel < cfg->persist_threshold); /* params_in_file */
        if (on_demand && us->shard_numel > most) most = us->shard_numel;
    }
    *stage_bytes = most ? 2 * zt_nvme_round(most * d) + ZT_NVME_ALIGN : 0;
    return cfg->nvme_optimizer ? (size_t)cfg->nvme.buffers * slot + ZT_NVME_ALIGN : 0;
}

static zt_status alloc_buffers(zt_engine *e, struct zt_nvme_state *nv) {
    size_t stage;
    size_t bytes = zt_nvme_buffer_bytes(e->spec, &e->cfg, &stage);
    ZT_TRY(zt_engine_alloc_host(e, &nv->buffers, ZT_FP32, bytes / 4, ZT_CAT_COMM_BUFFERS, "nvme buffers", -1));
    nv->base = align_up(nv->buffers.data);
    nv->tickets = calloc((size_t)nv->K, sizeof *nv->tickets);
    if (!nv->tickets) return ZT_FAIL(&e->ctx->err, ZT_ERR_OOM, "nvme: cannot allocate %d tickets", nv->K);
    if (!stage) return ZT_OK;
    ZT_TRY(zt_engine_alloc_host(e, &nv->stage, ZT_FP32, stage / 4, ZT_CAT_COMM_BUFFERS, "nvme shard in", -1));
    nv->stage_bytes = (stage - ZT_NVME_ALIGN) / 2;
    nv->stage_at[0] = align_up(nv->stage.data);
    nv->stage_at[1] = nv->stage_at[0] + nv->stage_bytes;
    return ZT_OK;
}

zt_status zt_engine_nvme_init(zt_engine *e) {
    if (!e->cfg.nvme_optimizer) return ZT_OK;
    zt_ctx *ctx = e->ctx;
    const zt_nvme_config *c = &e->cfg.nvme;
    if (c->block_bytes < 2 * ZT_NVME_ALIGN || c->block_bytes % (2 * ZT_NVME_ALIGN) || c->buffers < 1)
        return ZT_FAIL(&ctx->err, ZT_ERR_INVALID, "nvme: the block size must be a multiple of %zu bytes (got %zu) "
                       "and the buffers at least 1 (got %d)", 2 * ZT_NVME_ALIGN, c->block_bytes, c->buffers);
    struct zt_nvme_state *nv = calloc(1, sizeof *nv);
    if (!nv) return ZT_FAIL(&ctx->err, ZT_ERR_OOM, "nvme: cannot allocate its state");
    e->nvme = nv;
    nv->file.fd = -1;
    nv->K = c->buffers;
    ZT_TRY(lay_out(e, nv));
    ZT_TRY(list_items(e, nv));
    ZT_TRY(alloc_buffers(e, nv));
    ZT_TRY(zt_mkdir_p(c->dir, &ctx->err));
    return zt_nvme_open(&nv->file, c->dir, e->world->rank, file_bytes(e), &c->io, &ctx->err);
}

void zt_engine_nvme_destroy(zt_engine *e) {
    struct zt_nvme_state *nv = e->nvme;
    if (!nv) return;
    zt_error ignore = {0};
    for (int k = 0; k < nv->K && nv->tickets; k++) (void)zt_nvme_wait(&nv->file, &nv->tickets[k], &ignore);
    for (int k = 0; k < 2; k++) {
        (void)zt_event_sync(e->ctx->be, nv->stage_done[k], &ignore);
        zt_event_destroy(e->ctx->be, nv->stage_done[k]);
    }
    zt_nvme_close(&nv->file);
    zt_tensor_free(&nv->buffers, &e->ctx->host_mem);
    zt_tensor_free(&nv->stage, &e->ctx->host_mem);
    free(nv->tickets);
    free(nv->off);
    free(nv->item_unit);
    free(nv->item_lo);
    free(nv);
    e->nvme = NULL;
}

/* ---- synchronous access (init, checkpoints, the digest) ---------------- */

/* Byte offset of element i of array a of unit u. */
static zt_status element_offset(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, size_t *off) {
    struct zt_nvme_state *nv = e->nvme;
    if (!nv || nv->off[u][a] == SIZE_MAX || i + n > region_numel(e, u, a))
        return ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "nvme: unit %d has no elements [%zu, %zu) of array %d in the file",
                       u, i, i + n, (int)a);
    *off = nv->off[u][a] + i * array_elem_size(e, a);
    return ZT_OK;
}

/* The buffers serve as the bounce: no step is in flight when these run. */
zt_status zt_engine_nvme_get(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, void *dst) {
    size_t off = 0;
    ZT_TRY(element_offset(e, u, a, i, n, &off));
    struct zt_nvme_state *nv = e->nvme;
    return zt_nvme_read_any(&nv->file, off, dst, n * array_elem_size(e, a), nv->base, (size_t)nv->K * nv->slot_bytes,
                            &e->ctx->err);
}

zt_status zt_engine_nvme_put(zt_engine *e, int u, zt_nvme_array a, size_t i, size_t n, const void *src) {
    size_t off = 0;
    ZT_TRY(element_offset(e, u, a, i, n, &off));
    struct zt_nvme_state *nv = e->nvme;
    return zt_nvme_write_any(&nv->file, off, src, n * array_elem_size(e, a), nv->base, (size_t)nv->K * nv->slot_bytes,
                             &e->ctx->err);
}

/* ---- the optimizer step's stream --------------------------------------- */

static size_t item_numel(const zt_engine *e, const struct zt_nvme_state *nv, int i) {
    size_t left = owned_numel(e, nv->item_unit[i]) - nv->item_lo[i];
    return left < nv->chunk ? left : nv->chunk;
}

/* Reads or writes every array of item i through its buffer. */
static zt_status move_item(zt_engine *e, int i, int write) {
    struct zt_nvme_state *nv = e->nvme;
    int u = nv->item_unit[i], k = i % nv->K;
    size_t n = item_numel(e, nv, i);
    for (int a = 0; a < ZT_NVME_NARRAYS; a++) {
        if (nv->at[a] == SIZE_MAX || nv->off[u][a] == SIZE_MAX) continue;
        size_t es = array_elem_size(e, (zt_nvme_array)a);
        ZT_TRY(zt_nvme_submit(&nv->file, write, nv->base + (size_t)k * nv->slot_bytes + nv->at[a],
                              nv->off[u][a] + nv->item_lo[i] * es, zt_nvme_round(n * es), &nv->tickets[k],
                              &e->ctx->err));
    }
    return ZT_OK;
}

static zt_status wait_ticket(zt_engine *e, int k) {
    struct zt_nvme_state *nv = e->nvme;
    double t0 = zt_now_s();
    zt_status s = zt_nvme_wait(&nv->file, &nv->tickets[k], &e->ctx->err);
    nv->wait_s += zt_now_s() - t0;
    return s;
}

/* Starts the reads of items up to (not including) `limit`, each once its
 * buffer's previous item is written. */
static zt_status read_ahead(zt_engine *e, int limit) {
    struct zt_nvme_state *nv = e->nvme;
    if (limit > nv->nitems) limit = nv->nitems;
    for (; nv->next_read < limit; nv->next_read++) {
        ZT_TRY(wait_ticket(e, nv->next_read % nv->K));
        ZT_TRY(move_item(e, nv->next_read, 0));
    }
    return ZT_OK;
}

zt_status zt_engine_nvme_begin_step(zt_engine *e) {
    struct zt_nvme_state *nv = e->nvme;
    nv->next_read = nv->next_step = 0;
    return read_ahead(e, nv->K - 1);
}

/* Item i's update: the optimizer on its buffer, new params to `out` (the
 * unit's [owned] params, at the item's place) or to the buffer's params. */
static zt_status update_item(zt_engine *e, int i, float *g, void *out, float clip, float lr, int t) {
    struct zt_nvme_state *nv = e->nvme;
    int u = nv->item_unit[i];
    char *buf = nv->base + (size_t)(i % nv->K) * nv->slot_bytes;
    size_t lo = nv->item_lo[i], n = item_numel(e, nv, i), olo = owned_lo(e, u), d = zt_dtype_size(e->cfg.dtype);
    float *p = (float *)(void *)(buf + nv->at[ZT_NVME_MASTER]);
    float *slot[2]; /* each slot's values of the item, where the optimizer keeps it */
    for (int k = 0; k < 2; k++) {
        size_t at = nv->at[ZT_NVME_SLOT0 + k];
        slot[k] = at == SIZE_MAX ? NULL : (float *)(void *)(buf + at);
    }
    char *o = out ? (char *)out + lo * d : buf + nv->at[ZT_NVME_PARAMS];
    int written = optim_of(e)->host_range(e, u, olo + lo, olo + lo + n, p, g + lo, slot,
                                          e->cfg.dtype == ZT_FP16 ? NULL : o, clip, lr, t);
    /* Padding never changes, but the params are rewritten whole. */
    const size_t numel = e->spec->units[u].numel;
    for (size_t j = 0; j < n; j++)
        if (olo + lo + j >= numel || !written) zt_dtype_store(o, e->cfg.dtype, j, p[j]);
    return ZT_OK;
}

zt_status zt_engine_nvme_step_unit(zt_engine *e, int u, float *g, void *out, float clip, float lr, int t) {
    struct zt_nvme_state *nv = e->nvme;
    for (; nv->next_step < nv->nitems && nv->item_unit[nv->next_step] == u; nv->next_step++) {
        int i = nv->next_step;
        ZT_TRY(read_ahead(e, i + 1)); /* with one buffer nothing was read ahead */
        ZT_TRY(wait_ticket(e, i % nv->K));
        ZT_TRY(update_item(e, i, g, out, clip, lr, t));
        ZT_TRY(move_item(e, i, 1));
        ZT_TRY(read_ahead(e, i + nv->K));
    }
    return ZT_OK;
}

zt_status zt_engine_nvme_end_step(zt_engine *e) {
    struct zt_nvme_state *nv = e->nvme;
    zt_status s = ZT_OK;
    for (int k = 0; k < nv->K; k++) { /* every buffer, even after a failure: nothing may stay in flight */
        zt_status w = wait_ticket(e, k);
        if (s == ZT_OK) s = w;
    }
    if (s == ZT_OK && nv->next_step != nv->nitems)
        s = ZT_FAIL(&e->ctx->err, ZT_ERR_INTERNAL, "nvme: the step updated %d of %d items", nv->next_step, nv->nitems);
    return s;
}

/* ---- parameter shards for the gathers --------------------------------- */

zt_status zt_engine_nvme_copy_shard(zt_engine *e, int u, void *dst, zt_copy_kind kind) {
    struct zt_nvme_state *nv = e->nvme;
    zt_ctx *ctx = e->ctx;
    int k = nv->stage_slot;
    size_t bytes = e->spec->units[u].shard_numel * zt_dtype_size(e->cfg.dtype);
    ZT_TRY(zt_event_sync(ctx->be, nv->stage_done[k], &ctx->err)); /* its copy two gathers ago has read it */
    zt_event_destroy(ctx->be, nv->stage_done[k]);
    nv->stage_done[k] = NULL;
    size_t off = 0;
    ZT_TRY(element_offset(e, u, ZT_NVME_PARAMS, 0, e->spec->units[u].shard_numel, &off));
    double t0 = zt_now_s();
    zt_status s = zt_nvme_request(&nv->file, 0, nv->stage_at[k], off, zt_nvme_round(bytes), &ctx->err);
    nv->wait_s += zt_now_s() - t0;
    ZT_TRY(s);
    ZT_TRY(ctx->be->memcpy_async(ctx->be, dst, nv->stage_at[k], bytes, kind, &ctx->compute, &ctx->err));
    nv->stage_slot = k ^ 1;
    return zt_event_record(ctx->be, &ctx->compute, &nv->stage_done[k], &ctx->err);
}

zt_nvme_stats zt_engine_nvme_stats(const zt_engine *e) {
    zt_nvme_stats s;
    memset(&s, 0, sizeof s);
    const struct zt_nvme_state *nv = e->nvme;
    if (!nv) return s;
    s.read_bytes = nv->file.read_bytes;
    s.write_bytes = nv->file.write_bytes;
    s.wait_s = nv->wait_s;
    s.file_bytes = nv->file.bytes;
    s.path = nv->file.path;
    s.how = nv->file.how;
    return s;
}
