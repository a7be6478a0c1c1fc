/* zt-export: writes a checkpoint's consolidated parameters (the fp32 master
 * values, from any world size and stage).
 *   zt-export CHECKPOINT_DIR OUT.safetensors [--dtype fp32|bf16|fp16]
 *       one safetensors file with zerotrain's own tensor names
 *   zt-export CHECKPOINT_DIR OUT_DIR --format hf [--dtype D] [--max-shard-size SIZE]
 *       a Hugging Face model directory (docs/interop_export.md)
 * Exit codes: 0 written, 2 bad input (a bad checkpoint or arguments), 1 a
 * failed write; every file is written whole or not at all. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "zt_checkpoint.h"

static const char usage[] =
    "usage: zt-export CHECKPOINT_DIR OUT [--format native|hf] [--dtype fp32|bf16|fp16] [--max-shard-size SIZE]\n"
    "  --format native  OUT.safetensors: one file, zerotrain's tensor names (the default)\n"
    "  --format hf      OUT_DIR: model.safetensors (or shards + index) and config.json for transformers\n"
    "  --dtype          the tensors' dtype (default fp32: the checkpoint's master values as stored)\n"
    "  --max-shard-size hf: the most bytes per safetensors file (default 5GB; e.g. 10MB, 2GiB)\n";

typedef struct {
    int hf;
    zt_dtype dtype;
    uint64_t max_shard;
    const char *ckpt, *out;
} export_args;

/* 0 when parsed; otherwise the message is printed and 2 returned. */
static int parse_args(int argc, char **argv, export_args *a) {
    static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                         {"dtype", required_argument, NULL, 'd'},
                                         {"max-shard-size", required_argument, NULL, 's'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c, shard_given = 0;
    *a = (export_args){.dtype = ZT_FP32, .max_shard = ZT_HF_DEFAULT_SHARD_BYTES};
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'f' && (strcmp(optarg, "hf") == 0 || strcmp(optarg, "native") == 0)) a->hf = optarg[0] == 'h';
        else if (c == 'f') return fprintf(stderr, "zt-export: error: --format '%s' is not native or hf\n", optarg), 2;
        else if (c == 'd' && !zt_dtype_parse(optarg, &a->dtype))
            return fprintf(stderr, "zt-export: error: --dtype '%s' is not fp32, bf16 or fp16\n", optarg), 2;
        else if (c == 's' && !zt_parse_byte_size(optarg, &a->max_shard))
            return fprintf(stderr, "zt-export: error: --max-shard-size '%s' is not a size (5GB, 10MB, 4096)\n",
                           optarg), 2;
        else if (c == 's') shard_given = 1;
        else if (c == 'h') return fputs(usage, stdout), 2;
        else if (c == '?') return fprintf(stderr, "zt-export: error: unknown option %s\n%s", argv[optind - 1], usage), 2;
    }
    if (argc - optind != 2) return fprintf(stderr, "%s", usage), 2;
    if (shard_given && !a->hf)
        return fprintf(stderr, "zt-export: error: --max-shard-size applies to --format hf only\n"), 2;
    a->ckpt = argv[optind];
    a->out = argv[optind + 1];
    return 0;
}

int main(int argc, char **argv) {
    export_args a;
    int bad = parse_args(argc, argv, &a), nshards = 1;
    if (bad) return bad;
    zt_error err = {0};
    zt_export_hf_options o = {.dtype = a.dtype, .max_shard_bytes = a.max_shard};
    zt_status st = a.hf ? zt_export_hf(a.ckpt, a.out, &o, &nshards, &err)
                        : zt_export_safetensors(a.ckpt, a.out, a.dtype, &err);
    if (st != ZT_OK) {
        fprintf(stderr, "zt-export: error: %s\n  (%s at %s)\n", err.msg, zt_status_name(err.code), err.where);
        return err.code == ZT_ERR_IO || err.code == ZT_ERR_OOM ? 1 : 2;
    }
    if (a.hf) printf("zt-export: wrote %s (Hugging Face layout, %s tensors, %d safetensors file(s))\n", a.out,
                     zt_dtype_name(a.dtype), nshards);
    else printf("zt-export: wrote %s (%s tensors)\n", a.out, zt_dtype_name(a.dtype));
    return 0;
}
