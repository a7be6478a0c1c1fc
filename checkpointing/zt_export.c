/* zt-export: writes a checkpoint's consolidated parameters (the fp32 master
 * values, from any world size and stage) as one safetensors file: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data.
 *   zt-export CHECKPOINT_DIR OUT.safetensors [--dtype fp32|bf16]
 * Exit codes: 0 written, 2 bad input (nothing written). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_checkpoint.h"

static int fail(const zt_error *err) {
    fprintf(stderr, "zt-export: error: %s\n", err->msg);
    return 2;
}

int main(int argc, char **argv) {
    zt_error err = {0};
    if (argc < 3 || argc > 5 || (argc == 4) || (argc == 5 && strcmp(argv[3], "--dtype") != 0)) {
        fprintf(stderr, "usage: zt-export CHECKPOINT_DIR OUT.safetensors [--dtype fp32|bf16]\n");
        return 2;
    }
    int bf16 = 0;
    if (argc == 5) {
        if (strcmp(argv[4], "bf16") == 0) bf16 = 1;
        else if (strcmp(argv[4], "fp32") != 0) {
            fprintf(stderr, "zt-export: error: --dtype '%s' is not fp32 or bf16\n", argv[4]);
            return 2;
        }
    }
    zt_ckpt_info info;
    if (zt_ckpt_open(argv[1], &info, &err) != ZT_OK || zt_ckpt_verify(&info, &err) != ZT_OK) {
        zt_ckpt_close(&info);
        return fail(&err);
    }
    json_t *units = json_object_get(info.manifest, "units");
    size_t esize = bf16 ? 2 : 4, offset = 0;
    json_t *header = json_object(), *meta = json_object();
    char text[64];
    snprintf(text, sizeof text, "%d", info.step);
    json_object_set_new(meta, "step", json_string(text));
    json_object_set_new(meta, "producer", json_string("zerotrain zt-export"));
    json_object_set_new(header, "__metadata__", meta);
    size_t largest = 0;
    for (size_t u = 0; u < json_array_size(units); u++) {
        json_t *uj = json_array_get(units, u), *params = json_object_get(uj, "params");
        size_t numel = (size_t)json_integer_value(json_object_get(uj, "numel"));
        if (numel > largest) largest = numel;
        for (size_t p = 0; p < json_array_size(params); p++) {
            json_t *pj = json_array_get(params, p), *t = json_object(), *range = json_array();
            size_t n = (size_t)json_integer_value(json_object_get(pj, "numel"));
            char name[96];
            snprintf(name, sizeof name, "%s.%s", json_string_value(json_object_get(uj, "name")),
                     json_string_value(json_object_get(pj, "name")));
            json_object_set_new(t, "dtype", json_string(bf16 ? "BF16" : "F32"));
            json_object_set(t, "shape", json_object_get(pj, "shape"));
            json_array_append_new(range, json_integer((json_int_t)offset));
            json_array_append_new(range, json_integer((json_int_t)(offset + n * esize)));
            json_object_set_new(t, "data_offsets", range);
            json_object_set_new(header, name, t);
            offset += n * esize;
        }
    }
    char *htext = json_dumps(header, JSON_COMPACT);
    json_decref(header);
    size_t hlen = strlen(htext), padded = (hlen + 7) / 8 * 8; /* data starts 8-byte aligned */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        zt_ckpt_close(&info);
        free(htext);
        fprintf(stderr, "zt-export: error: cannot write %s: %s\n", tmp, strerror(errno));
        return 2;
    }
    uint64_t le = (uint64_t)padded; /* x86-64 and aarch64 are little-endian */
    fwrite(&le, 8, 1, f);
    fwrite(htext, 1, hlen, f);
    for (size_t i = hlen; i < padded; i++) fputc(' ', f);
    free(htext);
    float *vals = malloc(largest * sizeof(float) + 4);
    zt_status st = vals ? ZT_OK : ZT_FAIL(&err, ZT_ERR_OOM, "cannot allocate");
    for (size_t u = 0; st == ZT_OK && u < json_array_size(units); u++) {
        json_t *uj = json_array_get(units, u), *params = json_object_get(uj, "params");
        st = zt_ckpt_read_unit(&info, (int)u, 0, vals, &err);
        for (size_t p = 0; st == ZT_OK && p < json_array_size(params); p++) {
            json_t *pj = json_array_get(params, p);
            size_t off = (size_t)json_integer_value(json_object_get(pj, "offset"));
            size_t n = (size_t)json_integer_value(json_object_get(pj, "numel"));
            if (!bf16) fwrite(vals + off, sizeof(float), n, f);
            else
                for (size_t i = 0; i < n; i++) {
                    zt_bf16 h = zt_f32_to_bf16(vals[off + i]);
                    fwrite(&h, 2, 1, f);
                }
        }
    }
    free(vals);
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    zt_ckpt_close(&info);
    if (st != ZT_OK || bad) {
        remove(tmp);
        return st != ZT_OK ? fail(&err) : (fprintf(stderr, "zt-export: error: writing %s failed\n", tmp), 2);
    }
    if (rename(tmp, argv[2]) != 0) {
        fprintf(stderr, "zt-export: error: cannot rename %s: %s\n", tmp, strerror(errno));
        return 2;
    }
    printf("zt-export: wrote %s (%zu bytes of %s tensors, step %d)\n", argv[2], offset, bf16 ? "bf16" : "fp32",
           info.step);
    return 0;
}
