/* Shared by the import's source files (not a public interface). */
#ifndef ZT_HF_IMPORT_INTERNAL_H
#define ZT_HF_IMPORT_INTERNAL_H

#include <jansson.h>

#include "hf_layout.h"

/* Problems collected for one message: every one counted, as many shown as fit. */
typedef struct {
    char text[720];
    int count, shown;
} hf_notes;
void hf_note(hf_notes *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "and N more" when some did not fit. */
void hf_notes_finish(hf_notes *n);

/* config.json (parsed, from path) against m: family, then every
 * hyperparameter, all mismatches in one ZT_ERR_INVALID. */
zt_status hf_config_check(const json_t *cfg, const hf_model *m, const char *path, zt_error *err);

#endif
