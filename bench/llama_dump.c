/* llama_dump: one forward and backward of the Llama family
 * (examples/llama/) through the engine, written out for an independent
 * float64 check (bench/llama_reference.py, which runs this program).
 *
 *   llama_dump --out PREFIX [--tied] [--fused] [--kv-heads N] [--norm-eps E] [--seed S]
 *
 * The model runs as zt-train runs it at one rank: world size 1, stage 0,
 * fp32, CPU backend, one thread (a fixed summation order, so a rerun writes
 * the same bytes). Shape: 2 layers, d_model 64, 4 heads (head_dim 16),
 * kv_heads 2 (grouped-query: kv head j serves query heads 2j, 2j+1),
 * ffn_dim 128, seq_len 16, vocab 64, micro-batch 2, norm_eps 1e-5 (a
 * larger one makes where eps sits in RMSNorm visible), rope_theta 10000.
 *
 * Parameters are NOT the family's initial values: those (std 0.02, norm
 * weights exactly 1) leave attention nearly uniform and every block nearly
 * linear, where a wrong softmax, gate or norm weight would hardly show.
 * Each matrix gets uniform values of std 1/sqrt(columns) and each norm
 * weight 1 +- 0.3, so activations are O(1) and every nonlinearity works
 * away from its small-input regime.
 *
 * Output: PREFIX.bin, raw little-endian fp32: every parameter (units in
 * order, parameters in declaration order), then every gradient in the same
 * order; PREFIX.json, its index: the settings, tokens, targets, the mean
 * loss, dloss, and per tensor its name (unit.param), shape and the element
 * offsets of its values and its gradient in PREFIX.bin. */
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "llama.h"
#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_engine.h"

#define BATCH 2 /* micro-batch B */
#define SEQ 16  /* seq_len T */

typedef struct {
    const char *out;
    int tied, fused, kv_heads;
    double norm_eps;
    uint64_t seed;
} options;

typedef struct {
    zt_ctx ctx;
    zt_comm comm;
    zt_llama llama;
    zt_engine eng;
} model;

/* ---- deterministic values (splitmix64: the same stream on every host) ---- */

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform_sym(uint64_t *s, float a) { /* uniform in [-a, a) */
    return a * (2.0f * (float)((double)(next_u64(s) >> 40) / 16777216.0) - 1.0f);
}

/* ---- setup ---------------------------------------------------------------- */

static int fail(const char *what, const zt_error *err) {
    fprintf(stderr, "llama_dump: %s: %s\n", what, err->msg);
    return 1;
}

static int parse(int argc, char **argv, options *o) {
    static const struct option longopts[] = {{"out", required_argument, NULL, 'o'},
                                             {"tied", no_argument, NULL, 't'},
                                             {"fused", no_argument, NULL, 'f'},
                                             {"kv-heads", required_argument, NULL, 'k'},
                                             {"norm-eps", required_argument, NULL, 'e'},
                                             {"seed", required_argument, NULL, 's'},
                                             {NULL, 0, NULL, 0}};
    *o = (options){.out = NULL, .tied = 0, .fused = 0, .kv_heads = 2, .norm_eps = 1e-5, .seed = 1};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 't': o->tied = 1; break;
        case 'f': o->fused = 1; break;
        case 'k': o->kv_heads = atoi(optarg); break;
        case 'e': o->norm_eps = atof(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        default: return 1;
        }
    }
    if (!o->out) {
        fprintf(stderr, "usage: llama_dump --out PREFIX [--tied] [--fused] [--kv-heads N] [--norm-eps E] [--seed S]\n");
        return 1;
    }
    return 0;
}

static zt_model_settings settings_for(const options *o) {
    zt_model_settings s;
    memset(&s, 0, sizeof s);
    s.layers = 2, s.d_model = 64, s.heads = 4, s.kv_heads = o->kv_heads, s.ffn_dim = 128;
    s.seq_len = SEQ, s.vocab = 64, s.micro_batch = BATCH, s.tied = o->tied;
    s.norm_eps = o->norm_eps, s.rope_theta = 10000.0, s.seed = o->seed;
    s.attention_fused = o->fused;
    return s;
}

/* One rank, stage 0, fp32, one CPU thread. The communicator is MPI's at
 * world size 1: the engine reduces through it even alone. */
static int model_open(model *m, const zt_model_settings *s) {
    memset(m, 0, sizeof *m);
    if (zt_ctx_init(&m->ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1) != ZT_OK) return fail("context", &m->ctx.err);
    if (zt_comm_create_mpi(&m->comm, &m->ctx.err) != ZT_OK) return fail("communicator", &m->ctx.err);
    if (zt_llama_create(&m->llama, s, &m->ctx.err) != ZT_OK) return fail("model", &m->ctx.err);
    zt_spec_layout(m->llama.dec.spec, 1);
    zt_engine_config ec = {.stage = 0, .dtype = ZT_FP32, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    if (zt_engine_init(&m->eng, &m->ctx, &m->comm, m->llama.dec.spec, &ec, zt_llama_init_param, &m->llama) != ZT_OK)
        return fail("engine", &m->ctx.err);
    return 0;
}

static void model_close(model *m) {
    zt_decoder_free_activations(&m->llama.dec, &m->eng);
    zt_engine_destroy(&m->eng);
    zt_llama_destroy(&m->llama);
    zt_comm_destroy(&m->comm);
    zt_ctx_destroy(&m->ctx);
}

static int is_norm_weight(const char *name) {
    return strcmp(name, "attn_norm_w") == 0 || strcmp(name, "mlp_norm_w") == 0 || strcmp(name, "norm_w") == 0;
}

/* Overwrites every parameter in place (see the header for why). */
static void set_wide_params(model *m, uint64_t seed) {
    const zt_model_spec *spec = m->llama.dec.spec;
    uint64_t r = seed * 0x100000001B3ull + 7;
    for (int u = 0; u < spec->nunits; u++) {
        float *p = zt_f32(&m->eng.units[u].params); /* [numel] fp32 at world size 1 */
        for (int k = 0; k < spec->units[u].nparams; k++) {
            const zt_param_spec *ps = &spec->units[u].params[k];
            int norm = is_norm_weight(ps->name);
            /* uniform on [-a, a) has std a / sqrt(3) */
            float a = norm ? 0.3f : sqrtf(3.0f) / sqrtf((float)ps->shape[ps->ndim - 1]);
            for (size_t i = 0; i < ps->numel; i++) p[ps->offset + i] = (norm ? 1.0f : 0.0f) + uniform_sym(&r, a);
        }
    }
}

/* ---- the pass --------------------------------------------------------------- */

/* Mean loss and the gradients of the mean (dloss = 1/(B*T) per position,
 * as zt-train's single micro-batch step). */
static int forward_backward(model *m, const int32_t *tok, const int32_t *tgt, int B, int T, float *loss) {
    zt_decoder *d = &m->llama.dec;
    if (zt_engine_zero_grads(&m->eng) != ZT_OK) return fail("zero_grads", &m->ctx.err);
    zt_engine_begin_micro(&m->eng, 1);
    if (zt_decoder_forward(d, &m->eng, tok, tgt, B, T, loss) != ZT_OK) return fail("forward", &m->ctx.err);
    float dloss = (float)m->eng.scaler.scale / ((float)B * (float)T);
    if (zt_decoder_backward(d, &m->eng, dloss) != ZT_OK) return fail("backward", &m->ctx.err);
    if (zt_engine_sync_grads(&m->eng) != ZT_OK) return fail("sync_grads", &m->ctx.err);
    return 0;
}

/* ---- output ------------------------------------------------------------------ */

static json_t *int_array(const int32_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

/* Values then gradients to PREFIX.bin; offsets (elements) into the index. */
static int write_tensors(const model *m, const char *path, json_t *index) {
    const zt_model_spec *spec = m->llama.dec.spec;
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t total = spec->total_numel, base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        const zt_unit_spec *usp = &spec->units[u];
        for (int k = 0; k < usp->nparams; k++) {
            const zt_param_spec *ps = &usp->params[k];
            char name[72];
            snprintf(name, sizeof name, "%s.%s", usp->name, ps->name);
            json_t *shape = json_array();
            for (int dim = 0; dim < ps->ndim; dim++) json_array_append_new(shape, json_integer(ps->shape[dim]));
            json_array_append_new(index, json_pack("{s:s,s:o,s:I,s:I}", "name", name, "shape", shape, "value",
                                                   (json_int_t)(base + ps->offset), "grad",
                                                   (json_int_t)(total + base + ps->offset)));
        }
        base += usp->numel;
    }
    int bad = 0;
    for (int u = 0; u < spec->nunits; u++)
        bad |= fwrite(m->eng.units[u].params.data, sizeof(float), spec->units[u].numel, f) != spec->units[u].numel;
    for (int u = 0; u < spec->nunits; u++)
        bad |= fwrite(m->eng.units[u].grads.data, sizeof(float), spec->units[u].numel, f) != spec->units[u].numel;
    bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "llama_dump: cannot write %s\n", path);
    return bad;
}

static int write_dump(const model *m, const options *o, const int32_t *tok, const int32_t *tgt, float loss) {
    const zt_model_settings *s = &m->llama.cfg;
    int B = BATCH, T = s->seq_len;
    char bin[1024], idx[1024];
    snprintf(bin, sizeof bin, "%s.bin", o->out);
    snprintf(idx, sizeof idx, "%s.json", o->out);
    json_t *tensors = json_array();
    /* The bin's name without its folder: the two files travel together. */
    const char *slash = strrchr(bin, '/');
    json_t *root = json_pack("{s:{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:b,s:f,s:f},s:i,s:i,s:o,s:o,s:f,s:f,s:s,s:o}",
                             "settings", "layers", s->layers, "d_model", s->d_model, "heads", s->heads, "kv_heads",
                             s->kv_heads, "ffn_dim", s->ffn_dim, "seq_len", s->seq_len, "vocab", s->vocab, "tied",
                             s->tied, "attention_fused", s->attention_fused, "norm_eps", s->norm_eps, "rope_theta",
                             s->rope_theta, "B", B, "T", T, "tokens", int_array(tok, B * T), "targets",
                             int_array(tgt, B * T), "loss", (double)loss, "dloss",
                             (double)(1.0f / ((float)B * (float)T)), "bin", slash ? slash + 1 : bin, "tensors",
                             tensors);
    int rc = write_tensors(m, bin, tensors);
    if (!rc && json_dump_file(root, idx, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0) {
        fprintf(stderr, "llama_dump: cannot write %s\n", idx);
        rc = 1;
    }
    json_decref(root);
    return rc;
}

/* ---- main -------------------------------------------------------------------- */

static int run(const options *o) {
    zt_model_settings s = settings_for(o);
    zt_error err = {0};
    if (zt_llama_resolve(&s, &err) != ZT_OK) return fail("settings", &err);
    model m;
    int rc = model_open(&m, &s);
    if (rc) return rc;
    set_wide_params(&m, o->seed);
    int B = BATCH, T = s.seq_len;
    int32_t tok[BATCH * SEQ], tgt[BATCH * SEQ]; /* [B,T] */
    uint64_t r = o->seed ^ 0x70CE57u;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(next_u64(&r) % (uint64_t)s.vocab);
        tgt[i] = (int32_t)(next_u64(&r) % (uint64_t)s.vocab);
    }
    float loss = NAN;
    rc = forward_backward(&m, tok, tgt, B, T, &loss);
    if (!rc) rc = write_dump(&m, o, tok, tgt, loss);
    if (!rc) printf("llama_dump: %s.{json,bin}: loss %.9g\n", o->out, (double)loss);
    model_close(&m);
    return rc;
}

int main(int argc, char **argv) {
    options o;
    if (parse(argc, argv, &o)) return 2;
    MPI_Init(&argc, &argv);
    int rc = run(&o);
    MPI_Finalize();
    return rc;
}
