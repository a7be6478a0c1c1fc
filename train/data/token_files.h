/* Pre-tokenized data: one file or a glob of them, concatenated in sorted
 * order into one stream of tokens that repeats (each repetition an epoch).
 * Formats: llm.c's shards (a 256 x int32 header: magic 20240520, version
 * 1, token count, then uint16 tokens; magic 20240801, version 7, uint32
 * tokens), flat uint16 or uint32 arrays (nanoGPT's train.bin) and bytes.
 * Tokens are read with pread where they are needed, so no rank holds the
 * whole set; every token read is checked against the vocabulary. */
#ifndef ZT_TOKEN_FILES_H
#define ZT_TOKEN_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "zt_error.h"

typedef enum {
    ZT_TOKENS_AUTO = 0, /* llm.c when the first file's header says so, else bytes */
    ZT_TOKENS_BYTES,
    ZT_TOKENS_UINT16,
    ZT_TOKENS_UINT32,
    ZT_TOKENS_LLMC,
} zt_token_format;

#define ZT_LLMC_HEADER_BYTES 1024 /* 256 x int32 */
#define ZT_LLMC_MAGIC_GPT2 20240520 /* version 1: uint16 tokens */
#define ZT_LLMC_MAGIC_LLAMA3 20240801 /* version 7: uint32 tokens */

typedef struct {
    char *path;
    uint64_t header_bytes; /* before the first token */
    uint64_t ntokens;
    uint64_t first; /* its first token's index in an epoch */
} zt_token_file;

typedef struct {
    const char *flag; /* "--data" or "--val-data", for messages */
    zt_token_file *files; /* [nfiles], sorted by path */
    int nfiles;
    int width; /* bytes per token: 1, 2 or 4 */
    zt_token_format format; /* resolved: never AUTO */
    uint64_t ntokens; /* one epoch */
    /* One file open at a time (a set may have more files than the process
     * may open): the one read last, and its descriptor (-1: none). */
    int open_index, open_fd;
} zt_token_files;

/* "auto", "bytes", "uint16", "uint32", "llmc"; 0 for anything else. */
int zt_token_format_parse(const char *name, zt_token_format *out);
const char *zt_token_format_name(zt_token_format f);

/* What AUTO means for this pattern: LLMC when its first file (in sorted
 * order) begins with an llm.c magic and version, else BYTES. Other
 * formats come back as given; a pattern matching nothing gives BYTES (the
 * open names the problem). */
zt_token_format zt_token_format_resolve(const char *pattern, zt_token_format f);

/* How many files the pattern (a path or a glob) names. */
int zt_token_pattern_matches(const char *pattern);

/* Opens every file the pattern matches (a path, taken as it is when it
 * names a file, or a glob) to check it; reads reopen them one at a time. Errors name the
 * file and the byte offset: no match, a truncated header, a wrong magic or
 * version, a size that is not whole tokens or not what the header says,
 * formats that differ between files. */
zt_status zt_token_files_open(zt_token_files *s, const char *flag, const char *pattern, zt_token_format f,
                              zt_error *err);
void zt_token_files_close(zt_token_files *s);

/* Tokens [index, index + n) of the endless stream (index counts across
 * epochs) into out[n]; a token >= vocab is an error naming its file and
 * byte offset. */
zt_status zt_token_files_read(zt_token_files *s, uint64_t index, size_t n, int vocab, int32_t *out,
                              zt_error *err);

/* What the set holds, for the ranks to compare without reading it all:
 * "K file(s), N uint16 tokens (llmc), xxh3 HEX" over each file's size,
 * header and 17 sampled 4 KiB chunks (the first, the last, and evenly
 * between). */
zt_status zt_token_files_identity(zt_token_files *s, char *out, size_t cap, zt_error *err);

#endif
