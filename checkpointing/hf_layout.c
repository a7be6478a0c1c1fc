/* The Hugging Face layout of the GPT and Llama families (hf_layout.h):
 * the rules that name each transformers tensor after a zerotrain parameter,
 * and config.json. docs/interop_export.md lists the same tables. */
#include "hf_layout.h"

#include <stdio.h>
#include <string.h>

/* One transformers tensor of a unit: `hf` (with %d for the block's index in
 * a block) is rows part `part` (-1: all) of zerotrain's `zt` parameter. */
typedef struct {
    const char *hf, *zt;
    int part, transpose;
} hf_rule;

/* GPT-2 (GPT2LMHeadModel): its Conv1D layers keep their weight as [in, out]
 * (y = x W + b), zerotrain's linears as [out, in] (y = x W^T + b). */
static const hf_rule gpt_embedding[] = {{"transformer.wte.weight", "wte", -1, 0}, {"transformer.wpe.weight", "wpe", -1, 0}};
static const hf_rule gpt_block[] = {
    {"transformer.h.%d.ln_1.weight", "ln1_w", -1, 0},        {"transformer.h.%d.ln_1.bias", "ln1_b", -1, 0},
    {"transformer.h.%d.attn.c_attn.weight", "qkv_w", -1, 1}, {"transformer.h.%d.attn.c_attn.bias", "qkv_b", -1, 0},
    {"transformer.h.%d.attn.c_proj.weight", "attproj_w", -1, 1},
    {"transformer.h.%d.attn.c_proj.bias", "attproj_b", -1, 0},
    {"transformer.h.%d.ln_2.weight", "ln2_w", -1, 0},        {"transformer.h.%d.ln_2.bias", "ln2_b", -1, 0},
    {"transformer.h.%d.mlp.c_fc.weight", "fc_w", -1, 1},     {"transformer.h.%d.mlp.c_fc.bias", "fc_b", -1, 0},
    {"transformer.h.%d.mlp.c_proj.weight", "fcproj_w", -1, 1},
    {"transformer.h.%d.mlp.c_proj.bias", "fcproj_b", -1, 0},
};
static const hf_rule gpt_head[] = {{"transformer.ln_f.weight", "lnf_w", -1, 0}, {"transformer.ln_f.bias", "lnf_b", -1, 0}};

/* Llama (LlamaForCausalLM): nn.Linear keeps [out, in] as zerotrain does;
 * the fused qkv (q, k, v rows) and gate_up (gate, up rows) are split. */
static const hf_rule llama_embedding[] = {{"model.embed_tokens.weight", "wte", -1, 0}};
static const hf_rule llama_block[] = {
    {"model.layers.%d.input_layernorm.weight", "attn_norm_w", -1, 0},
    {"model.layers.%d.self_attn.q_proj.weight", "qkv_w", 0, 0},
    {"model.layers.%d.self_attn.k_proj.weight", "qkv_w", 1, 0},
    {"model.layers.%d.self_attn.v_proj.weight", "qkv_w", 2, 0},
    {"model.layers.%d.self_attn.o_proj.weight", "attproj_w", -1, 0},
    {"model.layers.%d.post_attention_layernorm.weight", "mlp_norm_w", -1, 0},
    {"model.layers.%d.mlp.gate_proj.weight", "gate_up_w", 0, 0},
    {"model.layers.%d.mlp.up_proj.weight", "gate_up_w", 1, 0},
    {"model.layers.%d.mlp.down_proj.weight", "down_w", -1, 0},
};
static const hf_rule llama_head[] = {{"model.norm.weight", "norm_w", -1, 0}};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Appends key to the comma-separated list missing[cap]. */
static void note_missing(char *missing, size_t cap, const char *key) {
    size_t len = strlen(missing);
    snprintf(missing + len, cap - len, "%s%s", len ? ", " : "", key);
}

/* Reads a positive integer key into *out, or notes it missing. */
static void need_int(const json_t *model, const char *key, int *out, char *missing, size_t cap) {
    const json_t *v = json_object_get(model, key);
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < (1 << 30))
        *out = (int)json_integer_value(v);
    else note_missing(missing, cap, key);
}

static void need_number(const json_t *model, const char *key, double *out, char *missing, size_t cap) {
    const json_t *v = json_object_get(model, key);
    if (json_is_number(v) && json_number_value(v) > 0) *out = json_number_value(v);
    else note_missing(missing, cap, key);
}

zt_status hf_model_parse(const json_t *model, const char *where, hf_model *m, zt_error *err) {
    const char *family = json_string_value(json_object_get(model, "family"));
    memset(m, 0, sizeof *m);
    if (!json_is_object(model))
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: no run.model (not a zerotrain training checkpoint)", where);
    if (!family) family = "gpt"; /* checkpoints written before families were recorded hold a GPT */
    if (strcmp(family, "gpt") != 0 && strcmp(family, "llama") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: model family '%s' has no Hugging Face layout (gpt and llama have)",
                       where, family);
    m->llama = strcmp(family, "llama") == 0;
    char missing[256] = "";
    need_int(model, "layers", &m->layers, missing, sizeof missing);
    need_int(model, "d_model", &m->d_model, missing, sizeof missing);
    need_int(model, "heads", &m->heads, missing, sizeof missing);
    need_int(model, "ffn_dim", &m->ffn_dim, missing, sizeof missing);
    need_int(model, "seq_len", &m->seq_len, missing, sizeof missing);
    need_int(model, "vocab", &m->vocab, missing, sizeof missing);
    need_number(model, "norm_eps", &m->norm_eps, missing, sizeof missing);
    if (m->llama) need_int(model, "kv_heads", &m->kv_heads, missing, sizeof missing);
    else m->kv_heads = m->heads;
    if (m->llama) need_number(model, "rope_theta", &m->rope_theta, missing, sizeof missing);
    const json_t *tied = json_object_get(model, "tied");
    if (!json_is_boolean(tied)) note_missing(missing, sizeof missing, "tied");
    m->tied = json_is_true(tied);
    if (missing[0])
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: run.model of this %s checkpoint has no (valid) %s, which the "
                       "Hugging Face config needs (written by a zerotrain that did not record them: resume it with "
                       "this one and save again)", where, family, missing);
    if (m->d_model % m->heads != 0 || m->heads % m->kv_heads != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: run.model's d_model %d, heads %d, kv_heads %d are inconsistent", where,
                       m->d_model, m->heads, m->kv_heads);
    return ZT_OK;
}

zt_status hf_model_read(const zt_ckpt_info *info, hf_model *m, zt_error *err) {
    char where[1100];
    snprintf(where, sizeof where, "%s/manifest.json", info->dir);
    ZT_TRY(hf_model_parse(json_object_get(json_object_get(info->manifest, "run"), "model"), where, m, err));
    if (m->layers > info->nunits) /* each block is a unit: also bounds the tensor count */
        return ZT_FAIL(err, ZT_ERR_INVALID, "%s: run.model has %d layers, the manifest %d units", where, m->layers,
                       info->nunits);
    return ZT_OK;
}

int hf_tensor_count_max(const hf_model *m) {
    return m->llama ? COUNT(llama_embedding) + m->layers * COUNT(llama_block) + COUNT(llama_head) + 1
                    : COUNT(gpt_embedding) + m->layers * COUNT(gpt_block) + COUNT(gpt_head) + 1;
}

/* The shape zerotrain gives parameter zt, [R, cols] (a vector: cols 1), and
 * its row parts (how a fused matrix splits); 0 when the name is unknown. */
static int expected_shape(const hf_model *m, const char *zt, int64_t *R, int64_t *cols, int64_t parts[3]) {
    int64_t C = m->d_model, F = m->ffn_dim, kv = (int64_t)m->kv_heads * (C / m->heads);
    static const char *const vectors[] = {"ln1_w", "ln1_b", "attproj_b", "ln2_w", "ln2_b", "fcproj_b", "lnf_w",
                                          "lnf_b", "attn_norm_w", "mlp_norm_w", "norm_w"};
    *cols = C;
    parts[0] = parts[1] = parts[2] = 0;
    for (int i = 0; i < COUNT(vectors); i++)
        if (strcmp(zt, vectors[i]) == 0) return *R = C, *cols = 1, 1;
    if (strcmp(zt, "wte") == 0 || strcmp(zt, "lm_head") == 0) return *R = m->vocab, 1;
    if (strcmp(zt, "wpe") == 0) return *R = m->seq_len, 1;
    if (strcmp(zt, "qkv_w") == 0) return parts[0] = C, parts[1] = parts[2] = kv, *R = C + 2 * kv, 1;
    if (strcmp(zt, "qkv_b") == 0) return *R = 3 * C, *cols = 1, 1;
    if (strcmp(zt, "attproj_w") == 0) return *R = C, 1;
    if (strcmp(zt, "fc_w") == 0) return *R = F, 1;
    if (strcmp(zt, "fc_b") == 0) return *R = F, *cols = 1, 1;
    if (strcmp(zt, "fcproj_w") == 0 || strcmp(zt, "down_w") == 0) return *R = C, *cols = F, 1;
    if (strcmp(zt, "gate_up_w") == 0) return parts[0] = parts[1] = F, *R = 2 * F, 1;
    return 0;
}

/* Unit `unit_name`'s parameter `zt` in the manifest: its indices and offset;
 * its shape checked against expected_shape. */
static zt_status find_param(const json_t *units, const char *where, const hf_model *m, const char *unit_name,
                            const char *zt, hf_tensor *t, int64_t parts[3], zt_error *err) {
    int64_t R, cols;
    if (!expected_shape(m, zt, &R, &cols, parts))
        return ZT_FAIL(err, ZT_ERR_INVALID, "hf layout: no shape for parameter %s", zt); /* a table bug */
    for (size_t u = 0; u < json_array_size(units); u++) {
        const json_t *uj = json_array_get(units, u), *params = json_object_get(uj, "params");
        if (strcmp(json_string_value(json_object_get(uj, "name")), unit_name) != 0) continue;
        for (size_t p = 0; p < json_array_size(params); p++) {
            const json_t *pj = json_array_get(params, p), *shape = json_object_get(pj, "shape");
            if (strcmp(json_string_value(json_object_get(pj, "name")), zt) != 0) continue;
            int64_t d0 = json_integer_value(json_array_get(shape, 0));
            int64_t d1 = json_array_size(shape) > 1 ? json_integer_value(json_array_get(shape, 1)) : 1;
            if (json_array_size(shape) > 2 || d0 != R || d1 != cols)
                return ZT_FAIL(err, ZT_ERR_INVALID, "%s: %s.%s has shape [%lld, %lld]; run.model "
                               "implies [%lld, %lld]", where, unit_name, zt, (long long)d0, (long long)d1,
                               (long long)R, (long long)cols);
            t->unit = (int)u, t->param = (int)p;
            t->offset = (size_t)json_integer_value(json_object_get(pj, "offset"));
            t->rows = R, t->cols = cols, t->vector = json_array_size(shape) == 1;
            return ZT_OK;
        }
    }
    return ZT_FAIL(err, ZT_ERR_INVALID, "%s: no parameter %s.%s, which the %s layout needs", where,
                   unit_name, zt, m->llama ? "Llama" : "GPT");
}

/* Appends the tensors of `rules` for unit `unit_name` (block `block`). */
static zt_status add_rules(const json_t *units, const char *where, const hf_model *m, const char *unit_name, int block,
                           const hf_rule *rules, int nrules, hf_tensor *out, int cap, int *n, zt_error *err) {
    for (int r = 0; r < nrules; r++) {
        if (*n >= cap) return ZT_FAIL(err, ZT_ERR_INVALID, "hf layout: more than %d tensors", cap);
        hf_tensor *t = &out[*n];
        int64_t parts[3];
        memset(t, 0, sizeof *t);
        ZT_TRY(find_param(units, where, m, unit_name, rules[r].zt, t, parts, err));
        snprintf(t->name, sizeof t->name, rules[r].hf, block);
        for (int k = 0; k < rules[r].part; k++) t->row0 += parts[k];
        if (rules[r].part >= 0) t->rows = parts[rules[r].part];
        t->transpose = rules[r].transpose;
        (*n)++;
    }
    return ZT_OK;
}

zt_status hf_tensors_of(const json_t *units, const char *where, const hf_model *m, hf_tensor *out, int cap, int *n,
                        zt_error *err) {
    static const hf_rule lm_head = {"lm_head.weight", "lm_head", -1, 0};
    *n = 0;
    ZT_TRY(add_rules(units, where, m, "embedding", 0, m->llama ? llama_embedding : gpt_embedding,
                     m->llama ? COUNT(llama_embedding) : COUNT(gpt_embedding), out, cap, n, err));
    for (int l = 0; l < m->layers; l++) {
        char unit[32];
        snprintf(unit, sizeof unit, "block%d", l);
        ZT_TRY(add_rules(units, where, m, unit, l, m->llama ? llama_block : gpt_block,
                         m->llama ? COUNT(llama_block) : COUNT(gpt_block), out, cap, n, err));
    }
    ZT_TRY(add_rules(units, where, m, "head", 0, m->llama ? llama_head : gpt_head,
                     m->llama ? COUNT(llama_head) : COUNT(gpt_head), out, cap, n, err));
    /* Tied: the head is the embedding, one tensor (transformers ties them on load). */
    if (!m->tied) ZT_TRY(add_rules(units, where, m, "head", 0, &lm_head, 1, out, cap, n, err));
    return ZT_OK;
}

zt_status hf_tensors(const zt_ckpt_info *info, const hf_model *m, hf_tensor *out, int cap, int *n, zt_error *err) {
    char where[1100];
    snprintf(where, sizeof where, "%s/manifest.json", info->dir);
    return hf_tensors_of(json_object_get(info->manifest, "units"), where, m, out, cap, n, err);
}

static const char *torch_dtype(zt_dtype dtype) {
    return dtype == ZT_BF16 ? "bfloat16" : dtype == ZT_FP16 ? "float16" : "float32";
}

/* Both configs set bos_token_id and eos_token_id to null: zerotrain trains
 * on token ids and knows no special tokens (GPT-2's default 50256 lies
 * outside a small vocabulary). */

/* GPT-2: LayerNorm eps, the tanh GELU ("gelu_new"), no dropout (zerotrain has none). */
static json_t *gpt_config(const hf_model *m, zt_dtype dtype) {
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:s,s:f,s:f,s:f,s:b,s:n,s:n,s:b,s:s}", "architectures",
                     "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", m->vocab, "n_positions", m->seq_len,
                     "n_ctx", m->seq_len, "n_embd", m->d_model, "n_layer", m->layers, "n_head", m->heads, "n_inner",
                     m->ffn_dim, "layer_norm_epsilon", m->norm_eps, "activation_function", "gelu_new",
                     "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "scale_attn_weights", 1,
                     "bos_token_id", "eos_token_id", "tie_word_embeddings", m->tied, "torch_dtype", torch_dtype(dtype));
}

/* Llama: RMSNorm eps, rotary base, SiLU-gated MLP, no biases. */
static json_t *llama_config(const hf_model *m, zt_dtype dtype) {
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:s,s:b,s:b,s:b,s:n,s:f,s:n,s:n,s:s}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size", m->vocab,
                     "hidden_size", m->d_model, "intermediate_size", m->ffn_dim, "num_hidden_layers", m->layers,
                     "num_attention_heads", m->heads, "num_key_value_heads", m->kv_heads, "head_dim",
                     m->d_model / m->heads, "max_position_embeddings", m->seq_len, "rms_norm_eps", m->norm_eps,
                     "rope_theta", m->rope_theta, "hidden_act", "silu", "attention_bias", 0, "mlp_bias", 0,
                     "tie_word_embeddings", m->tied, "rope_scaling", "attention_dropout", 0.0, "bos_token_id", "eos_token_id", "torch_dtype",
                     torch_dtype(dtype));
}

json_t *hf_config(const hf_model *m, zt_dtype dtype) {
    return m->llama ? llama_config(m, dtype) : gpt_config(m, dtype);
}
