/* config.json of a Hugging Face directory against the model a run builds
 * (zt_import_hf.h). A key the file lacks takes transformers' default for
 * it (what from_pretrained would build), so a config written by
 * transformers with few keys is read as transformers reads it. Every
 * mismatch goes into one list, so the user fixes them all at once. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hf_import_internal.h"

void hf_note(hf_notes *n, const char *fmt, ...) {
    char item[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item, sizeof item, fmt, ap);
    va_end(ap);
    size_t len = strlen(n->text);
    n->count++;
    if (len + strlen(item) + 3 >= sizeof n->text - 24) return; /* counted; "and N more" says so */
    snprintf(n->text + len, sizeof n->text - len, "%s%s", len ? "; " : "", item);
    n->shown++;
}

void hf_notes_finish(hf_notes *n) {
    size_t len = strlen(n->text);
    if (n->count > n->shown) snprintf(n->text + len, sizeof n->text - len, "; and %d more", n->count - n->shown);
}

/* Integer key (absent or null: fallback; fallback < 0: required). */
static void check_int(const json_t *cfg, const char *key, long long fallback, long long mine, const char *setting,
                      hf_notes *n) {
    const json_t *v = json_object_get(cfg, key);
    if ((!v || json_is_null(v)) && fallback >= 0) v = NULL;
    else if (!json_is_integer(v)) return hf_note(n, "%s is %s (an integer is needed)", key, v ? "not an integer" : "missing");
    long long theirs = v ? json_integer_value(v) : fallback;
    if (theirs != mine) hf_note(n, "`%s` %lld but %s %lld", setting, mine, key, theirs);
}

static void check_real(const json_t *cfg, const char *key, double fallback, double mine, const char *setting,
                       hf_notes *n) {
    const json_t *v = json_object_get(cfg, key);
    if (v && !json_is_number(v)) return hf_note(n, "%s is not a number", key);
    double theirs = v ? json_number_value(v) : fallback;
    /* the export writes 15 significant digits: equal up to that */
    if (fabs(theirs - mine) > 1e-12 * fabs(mine)) hf_note(n, "`%s` %g but %s %g", setting, mine, key, theirs);
}

static void check_bool(const json_t *cfg, const char *key, int fallback, int mine, const char *setting, hf_notes *n) {
    const json_t *v = json_object_get(cfg, key);
    if (v && !json_is_boolean(v)) return hf_note(n, "%s is not true or false", key);
    int theirs = v ? json_is_true(v) : fallback;
    if (theirs != mine) hf_note(n, "`%s` %d but %s %s", setting, mine, key, theirs ? "true" : "false");
}

/* A string key zerotrain computes one way only (its activation, say). */
static void check_string(const json_t *cfg, const char *key, const char *fallback, const char *const *ok, int nok,
                         hf_notes *n) {
    const json_t *v = json_object_get(cfg, key);
    const char *theirs = v ? json_string_value(v) : fallback;
    for (int i = 0; theirs && i < nok; i++)
        if (strcmp(theirs, ok[i]) == 0) return;
    hf_note(n, "%s %s%s%s (zerotrain computes %s)", key, theirs ? "\"" : "", theirs ? theirs : "is not a string",
            theirs ? "\"" : "", ok[0]);
}

/* GPT2Config's keys and defaults. n_positions sizes the learned position
 * table, which must be the run's seq_len rows. */
static void check_gpt(const json_t *cfg, const hf_model *m, hf_notes *n) {
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh"}; /* both the tanh form */
    check_int(cfg, "vocab_size", 50257, m->vocab, "vocab", n);
    check_int(cfg, "n_positions", 1024, m->seq_len, "seq_len", n);
    check_int(cfg, "n_embd", 768, m->d_model, "d_model", n);
    check_int(cfg, "n_layer", 12, m->layers, "layers", n);
    check_int(cfg, "n_head", 12, m->heads, "heads", n);
    check_int(cfg, "n_inner", 4LL * m->d_model, m->ffn_dim, "ffn_dim", n);
    check_real(cfg, "layer_norm_epsilon", 1e-5, m->norm_eps, "norm_eps", n);
    check_bool(cfg, "tie_word_embeddings", 1, m->tied, "tied", n);
    check_string(cfg, "activation_function", "gelu_new", gelu, 2, n);
}

/* rope_theta: top level (transformers 4), or in rope_parameters
 * (transformers 5), whose rope_type must be "default" (zerotrain has no
 * scaled rotary embedding); rope_scaling must be absent or null. */
static void check_rope(const json_t *cfg, const hf_model *m, hf_notes *n) {
    const json_t *params = json_object_get(cfg, "rope_parameters"), *scaling = json_object_get(cfg, "rope_scaling");
    if (json_is_object(params)) {
        const char *type = json_string_value(json_object_get(params, "rope_type"));
        if (type && strcmp(type, "default") != 0) hf_note(n, "rope_parameters.rope_type \"%s\" (zerotrain: default)", type);
        check_real(json_object_get(params, "rope_theta") ? params : cfg, "rope_theta", 10000.0, m->rope_theta,
                   "rope_theta", n);
    } else {
        check_real(cfg, "rope_theta", 10000.0, m->rope_theta, "rope_theta", n);
    }
    if (scaling && !json_is_null(scaling)) hf_note(n, "rope_scaling is set (zerotrain has no scaled rotary embedding)");
}

/* LlamaConfig's keys and defaults. The rotary embedding has no table, so
 * max_position_embeddings bounds seq_len rather than equalling it. */
static void check_llama(const json_t *cfg, const hf_model *m, hf_notes *n) {
    static const char *const silu[] = {"silu"};
    check_int(cfg, "vocab_size", 32000, m->vocab, "vocab", n);
    check_int(cfg, "hidden_size", 4096, m->d_model, "d_model", n);
    check_int(cfg, "intermediate_size", 11008, m->ffn_dim, "ffn_dim", n);
    check_int(cfg, "num_hidden_layers", 32, m->layers, "layers", n);
    check_int(cfg, "num_attention_heads", 32, m->heads, "heads", n);
    const json_t *kv = json_object_get(cfg, "num_key_value_heads");
    long long heads = json_is_integer(json_object_get(cfg, "num_attention_heads"))
                          ? json_integer_value(json_object_get(cfg, "num_attention_heads")) : 32;
    check_int(cfg, "num_key_value_heads", kv && !json_is_null(kv) ? -1 : heads, m->kv_heads, "kv_heads", n);
    check_int(cfg, "head_dim", m->d_model / m->heads, m->d_model / m->heads, "d_model` / `heads", n);
    const json_t *maxpos = json_object_get(cfg, "max_position_embeddings");
    long long mp = json_is_integer(maxpos) ? json_integer_value(maxpos) : 2048;
    if (mp < m->seq_len) hf_note(n, "`seq_len` %d but max_position_embeddings %lld", m->seq_len, mp);
    check_real(cfg, "rms_norm_eps", 1e-6, m->norm_eps, "norm_eps", n);
    check_rope(cfg, m, n);
    check_bool(cfg, "tie_word_embeddings", 0, m->tied, "tied", n);
    static const char *const no_bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if (json_is_true(json_object_get(cfg, no_bias[i]))) hf_note(n, "%s is true (zerotrain's Llama has no biases)", no_bias[i]);
    check_string(cfg, "hidden_act", "silu", silu, 1, n);
}

/* 1: LlamaForCausalLM, 0: GPT2LMHeadModel, -1: neither (architectures
 * first, else model_type). */
static int config_family(const json_t *cfg, const char **shown) {
    const char *arch = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    const char *type = json_string_value(json_object_get(cfg, "model_type"));
    *shown = arch ? arch : type ? type : "(no architectures or model_type)";
    if (arch) return strcmp(arch, "LlamaForCausalLM") == 0 ? 1 : strcmp(arch, "GPT2LMHeadModel") == 0 ? 0 : -1;
    if (type) return strcmp(type, "llama") == 0 ? 1 : strcmp(type, "gpt2") == 0 ? 0 : -1;
    return -1;
}

zt_status hf_config_check(const json_t *cfg, const hf_model *m, const char *path, zt_error *err) {
    const char *shown;
    int family = config_family(cfg, &shown);
    if (family < 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: %s is neither GPT2LMHeadModel nor LlamaForCausalLM "
                       "(the families zerotrain reads)", path, shown);
    if (family != m->llama)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s: `model` %s but the directory holds a %s", path,
                       m->llama ? "llama" : "gpt", shown);
    hf_notes n = {.text = ""};
    if (m->llama) check_llama(cfg, m, &n);
    else check_gpt(cfg, m, &n);
    if (n.count == 0) return ZT_OK;
    hf_notes_finish(&n);
    return ZT_FAIL(err, ZT_ERR_INVALID, "--init-from %s does not match the model: %s (give the model flags the "
                   "config's values)", path, n.text);
}
