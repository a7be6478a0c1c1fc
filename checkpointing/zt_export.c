/* zt-export: writes a checkpoint's consolidated parameters (the fp32 master
 * values, from any world size and stage) as one safetensors file.
 *   zt-export CHECKPOINT_DIR OUT.safetensors [--dtype fp32|bf16|fp16]
 * Exit codes: 0 written, 2 bad input (a bad checkpoint or arguments), 1 a
 * failed write; nothing is left at OUT unless it was written whole. */
#include <stdio.h>
#include <string.h>

#include "zt_checkpoint.h"

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 5 && strcmp(argv[3], "--dtype") == 0)) {
        fprintf(stderr, "usage: zt-export CHECKPOINT_DIR OUT.safetensors [--dtype fp32|bf16|fp16]\n");
        return 2;
    }
    zt_dtype dtype = ZT_FP32;
    if (argc == 5 && !zt_dtype_parse(argv[4], &dtype)) {
        fprintf(stderr, "zt-export: error: --dtype '%s' is not fp32, bf16 or fp16\n", argv[4]);
        return 2;
    }
    zt_error err = {0};
    if (zt_export_safetensors(argv[1], argv[2], dtype, &err) != ZT_OK) {
        fprintf(stderr, "zt-export: error: %s\n  (%s at %s)\n", err.msg, zt_status_name(err.code), err.where);
        return err.code == ZT_ERR_IO || err.code == ZT_ERR_OOM ? 1 : 2;
    }
    printf("zt-export: wrote %s (%s tensors)\n", argv[2], zt_dtype_name(dtype));
    return 0;
}
