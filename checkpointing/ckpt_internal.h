/* Shared by the checkpoint's source files (not a public interface). */
#ifndef ZT_CKPT_INTERNAL_H
#define ZT_CKPT_INTERNAL_H

#include "zt_checkpoint.h"
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
