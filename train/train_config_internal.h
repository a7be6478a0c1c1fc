/* Shared by train_config.c and train_config_ds.c (not a public interface). */
#ifndef ZT_TRAIN_CONFIG_INTERNAL_H
#define ZT_TRAIN_CONFIG_INTERNAL_H

#include <jansson.h>

#include "train_config.h"

/* Sets zt-train option `option` ("bucket-size") from a JSON value. */
zt_status zt_config_set_named(zt_train_config *c, const char *option, json_t *val, const char *where, zt_error *err);
/* Sets the option a top-level key of ours names ("d_model" or "d-model"). */
zt_status zt_config_set_option(zt_train_config *c, const char *key, json_t *val, const char *where, zt_error *err);
/* A JSON number in any notation that is whole. */
int json_whole(const json_t *val);
/* Reads every key of a config file's top-level object (ours and DeepSpeed's),
 * collecting every problem into one error. */
zt_status zt_config_read_keys(zt_train_config *c, json_t *root, const char *path, zt_error *err);

#endif
