/* The optimizers zt-train knows, by name. Adding one is a file in optim/
 * with its table and one line here; nothing in shard/, offload/ or
 * checkpointing/ names an optimizer. */
#include <string.h>

#include "zt_optim.h"

extern const zt_optim zt_optim_adamw, zt_optim_sgd, zt_optim_adafactor, zt_optim_adam8bit, zt_optim_muon;

static const zt_optim *const registry[] = {
    &zt_optim_adamw,
    &zt_optim_sgd,
    &zt_optim_adafactor,
    &zt_optim_adam8bit,
    &zt_optim_muon,
};

int zt_optim_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const zt_optim *zt_optim_at(int i) { return i >= 0 && i < zt_optim_count() ? registry[i] : NULL; }

const zt_optim *zt_optim_find(const char *name) {
    for (int i = 0; name && i < zt_optim_count(); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

const zt_optim *zt_optim_default(void) { return &zt_optim_adamw; }

const zt_optim *zt_optim_or_default(const zt_optim *opt) { return opt ? opt : zt_optim_default(); }

size_t zt_optim_state_bytes(const zt_optim *opt, const zt_engine_config *cfg, const zt_unit_spec *us, size_t lo,
                            size_t hi) {
    size_t words = 0;
    for (int i = 0; i < opt->nslots; i++) words += opt->slot_words(cfg, i, us, lo, hi);
    return (cfg->state_bf16 ? 2 : 4) * words; /* bf16 state: one 16-bit value per word counted */
}

int zt_optim_elementwise(const zt_optim *opt) {
    for (int i = 0; i < opt->nslots; i++)
        if (opt->slots[i].layout != ZT_SLOT_PER_ELEMENT) return 0;
    return 1;
}

size_t zt_optim_words_per_element(const zt_engine_config *cfg, int slot, const zt_unit_spec *us, size_t lo,
                                  size_t hi) {
    (void)cfg, (void)slot, (void)us;
    return hi - lo;
}
