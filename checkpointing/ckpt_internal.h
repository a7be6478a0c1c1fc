/* Shared by the checkpoint's source files (not a public interface). */
#ifndef ZT_CKPT_INTERNAL_H
#define ZT_CKPT_INTERNAL_H

#include "zt_checkpoint.h"
#include "zt_ctx.h"
#include "zt_fs.h"
#include "zt_optim.h"

#define CKPT_MAGIC "ZTCKPT02"
#define CKPT_HEADER 32 /* magic 8, version u32, dtype u32, step u64, nunits u64 */

/* The manifest as written: m's JSON, then its own checksum as the last key
 * (malloc'd; NULL when out of memory). */
char *ckpt_manifest_text(const json_t *m);
/* head[n] (a manifest up to where its checksum key goes, normally ending in
 * ",\n ") followed by the key, head's XXH64 and the closing brace, exactly as
 * ckpt_manifest_text ends (malloc'd, NUL-terminated, *len bytes without the
 * NUL when len is not NULL; NULL when out of memory). The fuzz harnesses
 * re-seal mutated manifests with it. */
char *ckpt_manifest_seal(const char *head, size_t n, size_t *len);
/* One save in progress on this rank (save.c). Its rank file comes from the
 * engine one unit at a time, or, for an asynchronous save, from `image`:
 * the whole file staged in host memory at the save's step. */
typedef struct {
    zt_engine *eng;
    zt_comm *comm;
    char dir[1024], tmpdir[1100];
    int step;
    const zt_ckpt_hooks *hooks;
    zt_fs *fs;                         /* the context's: every write counted there */
    zt_engine_state_counters counters; /* at the save's step */
    const unsigned char *image;        /* [ckpt_file_bytes] or NULL */
    unsigned long long *hashes;        /* [N][nunits * ZT_CKPT_KINDS] block checksums */
} ckpt_saver;

/* Collective: fills s and prepares D/.tmp-step-N (rank 0), agreed. */
zt_status ckpt_save_start(ckpt_saver *s, zt_engine *eng, zt_comm *comm, const char *dir, int step,
                          const zt_ckpt_hooks *hooks, zt_error *err);
/* This rank's row of s->hashes. */
unsigned long long *ckpt_own_hashes(const ckpt_saver *s);
/* This rank's file into the temporary directory: written, fsynced, renamed
 * (no collective: an asynchronous save's writer thread runs it). Errors
 * name the rank. */
zt_status ckpt_write_rank_file(const ckpt_saver *s, unsigned long long *hashes, zt_error *err);
/* Quantized gradients' error feedback (checkpointing/feedback.c): this
 * rank's file into the temporary directory (nothing without feedback); the
 * manifest's entry for it (NULL: none); and, collective, the load: read
 * back at the same world size and dtype, else dropped with a warning. */
zt_status ckpt_write_feedback(const ckpt_saver *s, zt_error *err);
/* A safetensors file's start on fd: the 8-byte little-endian length of
 * the JSON header (consumed), the header, spaces to an 8-byte boundary so
 * the data after it is aligned (checkpointing/export.c). */
zt_status ckpt_write_safetensors_header(int fd, const char *path, json_t *header, zt_error *err);
json_t *ckpt_feedback_json(const zt_engine *eng, int world_size);
zt_status ckpt_load_feedback(zt_engine *eng, zt_comm *comm, const zt_ckpt_info *info, zt_error *err);
/* Collective: agrees on every rank's `written`, then rank 0 writes the
 * manifest and publishes; on any failure the partial files go and the
 * previous checkpoint stays the newest. Frees s's buffers either way. */
zt_status ckpt_save_commit(ckpt_saver *s, zt_status written, const json_t *run_info, int keep, zt_error *err);
void ckpt_save_free(ckpt_saver *s);
/* Bytes of this engine's rank file, and the file's image at `step` into
 * image[ckpt_file_bytes]. */
size_t ckpt_file_bytes(const zt_engine *eng);
zt_status ckpt_stage_image(zt_engine *eng, int step, unsigned char *image);
/* Bytes of every rank file of this checkpoint. */
size_t ckpt_rank_file_bytes(const zt_ckpt_info *info);
/* The 32-byte header every rank file of info starts with. */
void ckpt_header(unsigned char out[CKPT_HEADER], zt_dtype dtype, int step, int nunits);
/* Byte offset of unit u's block `kind` in a rank file, and its size. */
size_t ckpt_block_offset(const zt_ckpt_info *info, int u, int kind);
size_t ckpt_block_bytes(const zt_ckpt_info *info, int u, int kind);
/* Reads block (file r, unit u, kind) into buf[ckpt_block_bytes] and checks
 * it against the manifest, and the file's header. */
zt_status ckpt_read_block(const zt_ckpt_info *info, int r, int u, int kind, void *buf, zt_error *err);
/* Every block of rank file r. */
zt_status ckpt_verify_file(const zt_ckpt_info *info, int r, zt_error *err);
/* out[]: which checkpoint older than step_dir verifies whole, for a message. */
void ckpt_suggest_older(const char *step_dir, char *out, size_t cap);
/* A step directory is complete when its manifest (written last) parses;
 * otherwise why[] says what is wrong. */
int ckpt_complete(const char *step_dir, char *why, size_t cap);

#endif
