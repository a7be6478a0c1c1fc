/* Sharded state checkpoints.
 *
 * Layout of a checkpoint directory D:
 *   D/latest                     the name of the newest checkpoint whose save
 *                                completed ("step-000010"); only a pointer
 *   D/step-000010/manifest.json  written by rank 0 last: run info, world size,
 *                                stage, dtype, unit layout, each rank file's
 *                                size, XXH64 and one XXH64 per block, and last
 *                                its own XXH64 ("manifest_xxh64", over every
 *                                byte before that key)
 *   D/step-000010/rank<r>.bin    a 32-byte header, then for every unit rank
 *                                r's world slice (S elements) as four blocks:
 *                                fp32 master values, the optimizer's blocks 0
 *                                and 1 (its table's ckpt_blocks: AdamW's
 *                                exp_avg, exp_avg_sq; SGD's momentum_buf and
 *                                zeros; optim/zt_optim.h), and the
 *                                compute-dtype params. The blocks keep these
 *                                positions whatever the optimizer, so files
 *                                written before the slots had names read alike
 *
 * A save writes D/.tmp-step-N (each file written, fsynced, renamed; the
 * manifest last), moves an existing step-N aside to step-N.replaced, renames
 * the new directory into place and then replaces `latest`: that rename is
 * the commit point. Only then are the aside copy and checkpoints beyond the
 * newest `keep` removed. A save killed at any point leaves a complete
 * checkpoint that resolves (docs/failure.md).
 *
 * Loading resolves D through `latest`; when `latest` is missing or names no
 * complete checkpoint, the newest complete one is taken with a warning. Each
 * rank reads and verifies only the blocks that hold the part it keeps (its
 * own file when world size and stage allow), and the ranks agree on the
 * result, so a damaged file fails every rank with one message naming it.
 * Files hold world slices, so any world size and stage can load them. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "zt_comm.h"
#include "zt_engine.h"

#define ZT_CKPT_VERSION 2
#define ZT_CKPT_KINDS 4 /* blocks per unit in a rank file: master, optimizer blocks 0 and 1, params */
#define ZT_CKPT_MANIFEST_MAX ((size_t)64 << 20)

/* Test hook: called at every point of a save where a crash may happen
 * (before and after each file's write, fsync and rename, each directory
 * rename and removal), with a name saying which. NULL: none. */
typedef struct {
    void (*at)(void *arg, int rank, int step, const char *point);
    void *arg;
} zt_ckpt_hooks;

/* run_info: the caller's description (model config, seed, data...) stored in
 * the manifest under "run"; its "model" member must match on load. keep: the
 * complete checkpoints left in dir (>= 1). Collective. A failure on any
 * rank (a full disk: ENOSPC, EIO, EROFS, EDQUOT) fails every rank with the
 * lowest failing rank's message, which names the rank, the path and the
 * errno; its partial files are removed and the previous checkpoint stays
 * the newest complete one. Every write goes through the context's zt_fs. */
zt_status zt_ckpt_save(zt_engine *eng, zt_comm *comm, const char *dir, int step, const json_t *run_info, int keep,
                       const zt_ckpt_hooks *hooks, zt_error *err);

/* An asynchronous save (--async-save 1). zt_ckpt_save_begin (collective)
 * prepares the directory, copies this rank's slices at `step` into host
 * memory (the host pool's checkpoint_staging category: the rank file's
 * whole image, zt_ckpt_rank_file_bytes_for) and starts a writer thread that
 * writes and fsyncs the rank file; it returns while the thread writes.
 * zt_ckpt_save_done says whether this rank's writer has ended (no MPI).
 * zt_ckpt_save_end (collective) joins the writer, agrees on every rank's
 * outcome and commits exactly as zt_ckpt_save does (same files, same
 * bytes) or removes the partial files; it frees p either way. The
 * checkpoint is not visible (no manifest, `latest` unchanged) until then. */
typedef struct zt_ckpt_pending zt_ckpt_pending;
zt_status zt_ckpt_save_begin(zt_engine *eng, zt_comm *comm, const char *dir, int step, const zt_ckpt_hooks *hooks,
                             zt_ckpt_pending **p, zt_error *err);
int zt_ckpt_save_done(const zt_ckpt_pending *p);
zt_status zt_ckpt_save_end(zt_ckpt_pending *p, const json_t *run_info, int keep, zt_error *err);
/* After a failure elsewhere, when no collective can be trusted: joins the
 * writer and frees p, committing nothing (the partial directory is removed
 * by the next save). NULL: nothing. */
void zt_ckpt_save_abandon(zt_ckpt_pending *p);
/* The host bytes an asynchronous save stages on this rank: its rank file,
 * for a spec laid out over the save's group and the compute dtype. */
size_t zt_ckpt_rank_file_bytes_for(const zt_model_spec *spec, zt_dtype dtype);

/* Newest complete checkpoint (its manifest parses) of step_dir's
 * directory older than step_dir, into older[cap]; 0 when none. */
int zt_ckpt_older_complete(const char *step_dir, char *older, size_t cap);

/* Resolves dir to one step directory: dir itself when it holds a manifest,
 * else the one `latest` names, else (warning[] says why `latest` was not
 * used) the newest complete one. Fails, listing what was found and why each
 * was refused, when none is complete. Reads manifests only. */
zt_status zt_ckpt_resolve(const char *dir, char *step_dir, size_t cap, char *warning, size_t wcap, zt_error *err);

/* Loads step_dir (zt_ckpt_resolve) into eng after checking that the
 * manifest's run.model equals expect_model. Each rank verifies what it reads;
 * on damage every rank fails with the same message, which names the file and
 * the newest older checkpoint that verifies. *step gets the checkpoint's
 * step. Collective. Nothing is written. */
zt_status zt_ckpt_load(zt_engine *eng, zt_comm *comm, const char *step_dir, const json_t *expect_model, int *step,
                       zt_error *err);

/* A parsed and checked manifest (every index and size in it is consistent,
 * so readers may trust them) and its step directory. */
typedef struct {
    json_t *manifest;
    char dir[1024]; /* the step directory */
    int world_size, step, nunits;
    zt_dtype dtype;
    unsigned long long manifest_hash; /* of the whole manifest file */
} zt_ckpt_info;

/* Parses manifest text (len bytes, from path: named in messages): its own
 * checksum, the format, and every field the readers use. */
zt_status zt_ckpt_parse_manifest(const char *text, size_t len, const char *path, zt_ckpt_info *info, zt_error *err);
/* zt_ckpt_resolve, then the manifest read and parsed. */
zt_status zt_ckpt_open(const char *dir, zt_ckpt_info *info, char *warning, size_t wcap, zt_error *err);
void zt_ckpt_close(zt_ckpt_info *info);
/* Unit u's elements per rank slice, and its unpadded size. */
size_t zt_ckpt_unit_shard(const zt_ckpt_info *info, int u);
size_t zt_ckpt_unit_numel(const zt_ckpt_info *info, int u);
/* Checks every block of every rank file (sizes and checksums). */
zt_status zt_ckpt_verify(const zt_ckpt_info *info, zt_error *err);
/* Reads elements [lo, hi) of unit u's kind (0 master, 1 m, 2 v: fp32; 3
 * params: the checkpoint's dtype) into dst[hi - lo], reading and verifying
 * every block that overlaps. */
zt_status zt_ckpt_read_range(const zt_ckpt_info *info, int u, int kind, size_t lo, size_t hi, void *dst,
                             zt_error *err);

/* Writes the checkpoint's consolidated fp32 master values (bf16, fp16: rounded) as
 * one safetensors file, atomically: out.tmp, every write checked, fsync,
 * rename. Nothing is left at out on failure. */
zt_status zt_export_safetensors(const char *dir, const char *out, zt_dtype dtype, zt_error *err);

/* Writes the checkpoint as a Hugging Face model directory out_dir (created
 * when missing; refused when it holds a checkpoint): the family's
 * transformers names, shapes and layouts (GPT2LMHeadModel, LlamaForCausalLM;
 * checkpointing/hf_layout.h), the fp32 master values (bf16, fp16: rounded),
 * in model.safetensors or, when they pass max_shard_bytes, in
 * model-0000K-of-0000N.safetensors with model.safetensors.index.json, and
 * config.json last, from the manifest's run.model. Every file is written
 * atomically (NAME.tmp, fsync, rename). *nshards (may be NULL) gets the
 * number of safetensors files. docs/interop_export.md. */
typedef struct {
    zt_dtype dtype;           /* of the written tensors */
    uint64_t max_shard_bytes; /* > 0; transformers' default is 5 GB (5e9 bytes) */
} zt_export_hf_options;
#define ZT_HF_DEFAULT_SHARD_BYTES 5000000000ull
zt_status zt_export_hf(const char *dir, const char *out_dir, const zt_export_hf_options *o, int *nshards,
                       zt_error *err);
/* "5GB", "10MB", "1.5GiB", "4096": bytes (KB, MB, GB, TB decimal as
 * transformers reads them; KiB, MiB, GiB, TiB binary; any case). 0 when
 * the text is not a positive size. */
int zt_parse_byte_size(const char *text, uint64_t *bytes);

#endif
