/* Asynchronous saves (zt_checkpoint.h): the rank file's image is staged in
 * the host pool at the save's step, a writer thread writes and fsyncs it
 * while training goes on, and the commit (agreement, manifest, `latest`)
 * waits for a later step boundary where every rank's writer has ended. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"

struct zt_ckpt_pending {
    ckpt_saver saver;
    zt_block *staging; /* the image, in the host pool as checkpoint_staging */
    zt_mem *pool;
    pthread_t writer;
    int started;
    atomic_int done;
    zt_status written; /* the writer's outcome, read after the join */
    zt_error write_err;
};

/* The writer thread: file I/O only (MPI is initialised single-threaded). */
static void *write_file(void *arg) {
    zt_ckpt_pending *p = arg;
    p->written = ckpt_write_rank_file(&p->saver, ckpt_own_hashes(&p->saver), &p->write_err);
    atomic_store(&p->done, 1);
    return NULL;
}

static void release(zt_ckpt_pending *p) {
    zt_mem_free(p->pool, p->staging);
    ckpt_save_free(&p->saver);
    free(p);
}

zt_status zt_ckpt_save_begin(zt_engine *eng, zt_comm *comm, const char *dir, int step, const zt_ckpt_hooks *hooks,
                             zt_ckpt_pending **out, zt_error *err) {
    *out = NULL;
    zt_ckpt_pending *p = calloc(1, sizeof *p);
    if (!p) return ZT_FAIL(err, ZT_ERR_OOM, "checkpoint: cannot allocate an asynchronous save");
    p->pool = &zt_engine_context(eng)->host_mem;
    zt_status st = ckpt_save_start(&p->saver, eng, comm, dir, step, hooks, err);
    if (st != ZT_OK) {
        free(p);
        return st;
    }
    st = zt_mem_alloc(p->pool, ckpt_file_bytes(eng), ZT_CAT_CHECKPOINT_STAGING, "checkpoint staging", &p->staging,
                      err);
    if (st == ZT_OK) st = ckpt_stage_image(eng, step, p->staging->ptr);
    if (st == ZT_OK) st = ckpt_write_feedback(&p->saver, err);
    /* Staging is local; its failure is agreed like a write's, so every rank
     * knows no save is in flight. */
    st = zt_comm_agree(comm, st, err);
    if (st != ZT_OK) {
        zt_error ignore = {0};
        (void)ckpt_save_commit(&p->saver, ZT_ERR_IO, NULL, 1, &ignore); /* removes the directory it prepared */
        release(p);
        return st;
    }
    p->saver.image = p->staging->ptr;
    atomic_init(&p->done, 0);
    int rc = pthread_create(&p->writer, NULL, write_file, p);
    if (rc != 0) { /* written here instead: still correct, only not overlapped */
        write_file(p);
    } else {
        p->started = 1;
    }
    *out = p;
    return ZT_OK;
}

int zt_ckpt_save_done(const zt_ckpt_pending *p) { return !p || atomic_load(&((zt_ckpt_pending *)p)->done); }

zt_status zt_ckpt_save_end(zt_ckpt_pending *p, const json_t *run_info, int keep, zt_error *err) {
    if (p->started) pthread_join(p->writer, NULL);
    zt_status written = p->written;
    if (written != ZT_OK) zt_error_adopt(err, written, p->write_err.where, p->write_err.msg);
    zt_status st = ckpt_save_commit(&p->saver, written, run_info, keep, err);
    release(p);
    return st;
}

void zt_ckpt_save_abandon(zt_ckpt_pending *p) {
    if (!p) return;
    if (p->started) pthread_join(p->writer, NULL);
    release(p);
}
