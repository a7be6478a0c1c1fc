/* libFuzzer harness for the checkpoint manifest reader, zt_ckpt_parse_manifest
 * (checkpointing/manifest.c): its self-checksum check, the JSON parse and
 * every field check. On success it calls zt_ckpt_unit_shard and
 * zt_ckpt_unit_numel for every unit and the block layout helpers the rank
 * file readers use, and checks what the parser promises (every size and
 * index consistent, so readers may trust them); a broken promise aborts.
 *
 * Input: byte 0 is a flag byte, the rest is the manifest text.
 *   bit 0 set: re-seal: the text's trailing "manifest_xxh64" part is dropped
 *              and a correct one appended (fuzz_reseal), so that mutations
 *              get past the checksum to the JSON and field checks.
 *   bit 0 clear: the text is parsed as it is (checksum checks included).
 * Seeds: tests/fuzz/corpus/manifest/ (from real checkpoints). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

/* What zt_ckpt_parse_manifest promises about an accepted manifest. */
static void check_layout(const zt_ckpt_info *info) {
    FUZZ_CHECK(info->manifest != NULL);
    FUZZ_CHECK(info->world_size >= 1 && info->nunits >= 1 && info->nunits <= ZT_MAX_UNITS);
    FUZZ_CHECK(info->dtype == ZT_FP32 || info->dtype == ZT_BF16);
    const json_t *units = json_object_get(info->manifest, "units");
    const json_t *files = json_object_get(info->manifest, "files");
    FUZZ_CHECK(json_array_size(units) == (size_t)info->nunits);
    FUZZ_CHECK(json_array_size(files) == (size_t)info->world_size);
    size_t file_bytes = ckpt_rank_file_bytes(info), end = CKPT_HEADER;
    for (int u = 0; u < info->nunits; u++) {
        size_t S = zt_ckpt_unit_shard(info, u), numel = zt_ckpt_unit_numel(info, u);
        FUZZ_CHECK(numel <= S * (size_t)info->world_size);
        const json_t *uj = json_array_get(units, (size_t)u);
        FUZZ_CHECK(json_string_value(json_object_get(uj, "name")) != NULL);
        const json_t *params = json_object_get(uj, "params");
        for (size_t p = 0; p < json_array_size(params); p++) {
            const json_t *pj = json_array_get(params, p);
            FUZZ_CHECK(json_string_value(json_object_get(pj, "name")) != NULL);
            json_int_t off = json_integer_value(json_object_get(pj, "offset"));
            json_int_t n = json_integer_value(json_object_get(pj, "numel"));
            FUZZ_CHECK(off >= 0 && n >= 0 && (size_t)off + (size_t)n <= numel);
        }
        for (int k = 0; k < ZT_CKPT_KINDS; k++) {
            FUZZ_CHECK(ckpt_block_offset(info, u, k) == end); /* blocks follow each other */
            end += ckpt_block_bytes(info, u, k);
        }
    }
    FUZZ_CHECK(end == file_bytes);
    for (int r = 0; r < info->world_size; r++) {
        const json_t *blocks = json_object_get(json_array_get(files, (size_t)r), "blocks");
        FUZZ_CHECK(json_array_size(blocks) == (size_t)info->nunits * ZT_CKPT_KINDS);
        for (size_t b = 0; b < json_array_size(blocks); b++) {
            const char *h = json_string_value(json_array_get(blocks, b));
            FUZZ_CHECK(h != NULL && strlen(h) == 16);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char *sealed = NULL;
    if (data[0] & 1) text = sealed = fuzz_reseal(text, len, &len);
    zt_ckpt_info info;
    memset(&info, 0, sizeof info);
    zt_error err = {0};
    zt_status st = zt_ckpt_parse_manifest(text, len, "fuzz/manifest.json", &info, &err);
    if (fuzz_verbose()) fprintf(stderr, "fuzz_manifest: %s\n", st == ZT_OK ? "parsed" : err.msg);
    if (st == ZT_OK) check_layout(&info);
    else FUZZ_CHECK(info.manifest == NULL && err.msg[0] != '\0');
    zt_ckpt_close(&info);
    free(sealed);
    return 0;
}
