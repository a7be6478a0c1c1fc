/* muon_dump: K steps of the GPT family (examples/gpt/) trained with
 * zerotrain's Muon (optim/muon.c) through the engine, written out for an
 * independent float64 check (bench/bench_muon.py, which runs this program).
 *
 *   muon_dump --out PREFIX [--steps K] [--lr LR] [--adjust original|match_rms_adamw]
 *             [--weight-decay WD] [--seed S]
 *
 * The model runs as zt-train runs it at one rank: world size 1, stage 0,
 * fp32, CPU backend, one thread (a fixed summation order, so a rerun writes
 * the same bytes), the family's own initial values. Shape: 2 layers,
 * d_model 64, 4 heads, seq_len 32, vocab 64, micro-batch 4, untied head.
 *
 * The optimizer is zt-train's --optimizer muon with its defaults
 * (train/train_config.c): Muon with momentum 0.95, Nesterov, 5
 * Newton-Schulz steps of coefficients (3.4445, -4.7750, 2.0315), eps 1e-7
 * on the hidden matrices (q, k and v of each qkv_w apart), AdamW with
 * betas (0.9, 0.95), eps 1e-8 at the same learning rate on the rest. The
 * learning rate is constant (no schedule) and nothing is clipped, so the
 * reference needs neither a schedule nor the global norm.
 *
 * Batches come from a seeded noisy affine chain (next = 5 prev + 3 mod V
 * three times in four, else uniform): learnable, so the loss falls and
 * the optimizer's state matters.
 *
 * Output: PREFIX.bin, raw little-endian fp32: K + 1 snapshots of every
 * parameter (units in order, parameters in declaration order), the initial
 * values then the values after each step; PREFIX.json, its index: the
 * settings, the optimizer's settings as the engine got them (fp32 values
 * widened), every step's tokens and targets, zerotrain's mean loss at
 * every step (before that step's update), and per tensor its name
 * (unit.param), shape, element offset in a snapshot, decay flag and
 * hidden parts. */
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gpt.h"
#include "zt_comm.h"
#include "zt_ctx.h"
#include "zt_engine.h"
#include "zt_optim.h"

#define BATCH 4 /* micro-batch B */
#define SEQ 32  /* seq_len T */

typedef struct {
    const char *out;
    int steps;
    double lr, weight_decay;
    int adjust; /* zt_muon_adjust */
    uint64_t seed;
} options;

typedef struct {
    zt_ctx ctx;
    zt_comm comm;
    zt_gpt gpt;
    zt_engine eng;
} model;

/* What the run records besides the snapshots: [steps][B*T] ids, [steps] losses. */
typedef struct {
    int32_t *tokens, *targets;
    float *loss;
} trace;

/* ---- deterministic values (splitmix64: the same stream on every host) ---- */

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One micro-batch of the chain: each row T + 1 ids, tokens its first T,
 * targets its last T. */
static void draw_batch(uint64_t *r, int V, int32_t *tok, int32_t *tgt) {
    for (int b = 0; b < BATCH; b++) {
        int32_t prev = (int32_t)(next_u64(r) % (uint64_t)V);
        for (int t = 0; t < SEQ; t++) {
            int32_t next = next_u64(r) % 4 ? (5 * prev + 3) % V : (int32_t)(next_u64(r) % (uint64_t)V);
            tok[b * SEQ + t] = prev;
            tgt[b * SEQ + t] = next;
            prev = next;
        }
    }
}

/* ---- setup ---------------------------------------------------------------- */

static int fail(const char *what, const zt_error *err) {
    fprintf(stderr, "muon_dump: %s: %s\n", what, err->msg);
    return 1;
}

static int usage(void) {
    fprintf(stderr, "usage: muon_dump --out PREFIX [--steps K] [--lr LR] [--adjust original|match_rms_adamw]\n"
                    "                 [--weight-decay WD] [--seed S]\n");
    return 1;
}

static int parse(int argc, char **argv, options *o) {
    static const struct option longopts[] = {{"out", required_argument, NULL, 'o'},
                                             {"steps", required_argument, NULL, 'k'},
                                             {"lr", required_argument, NULL, 'l'},
                                             {"adjust", required_argument, NULL, 'a'},
                                             {"weight-decay", required_argument, NULL, 'w'},
                                             {"seed", required_argument, NULL, 's'},
                                             {NULL, 0, NULL, 0}};
    *o = (options){.out = NULL, .steps = 20, .lr = 3e-3, .weight_decay = 0.1,
                   .adjust = ZT_MUON_ADJUST_MATCH_RMS_ADAMW, .seed = 1234};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'k': o->steps = atoi(optarg); break;
        case 'l': o->lr = atof(optarg); break;
        case 'w': o->weight_decay = atof(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        case 'a':
            if (strcmp(optarg, "original") == 0) o->adjust = ZT_MUON_ADJUST_ORIGINAL;
            else if (strcmp(optarg, "match_rms_adamw") == 0) o->adjust = ZT_MUON_ADJUST_MATCH_RMS_ADAMW;
            else return usage();
            break;
        default: return usage();
        }
    }
    if (!o->out || o->steps < 1 || !(o->lr > 0.0)) return usage();
    return 0;
}

/* zt-train's --optimizer muon defaults, at a constant lr and no clipping. */
static zt_engine_config engine_config_for(const options *o) {
    return (zt_engine_config){.stage = 0, .dtype = ZT_FP32, .optimizer = zt_optim_find("muon"),
                              .muon_momentum = 0.95f, .muon_nesterov = 1, .muon_ns_steps = 5,
                              .muon_ns_coef = {3.4445f, -4.7750f, 2.0315f}, .muon_eps = 1e-7f,
                              .muon_adjust_lr = o->adjust, .muon_adamw_lr_scale = 1.0f, .beta1 = 0.9f,
                              .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = (float)o->weight_decay,
                              .grad_clip = 0.0f};
}

/* One rank, stage 0, fp32, one CPU thread. The communicator is MPI's at
 * world size 1: the engine reduces through it even alone. */
static int model_open(model *m, const options *o) {
    memset(m, 0, sizeof *m);
    zt_gpt_config gc = {.layers = 2, .d_model = 64, .heads = 4, .seq_len = SEQ, .vocab = 64,
                        .micro_batch = BATCH, .tied = 0, .seed = o->seed};
    if (zt_ctx_init(&m->ctx, ZT_DEVICE_CPU, 1, 0, 0, 1, 1) != ZT_OK) return fail("context", &m->ctx.err);
    if (zt_comm_create_mpi(&m->comm, &m->ctx.err) != ZT_OK) return fail("communicator", &m->ctx.err);
    if (zt_gpt_create(&m->gpt, &gc, &m->ctx.err) != ZT_OK) return fail("model", &m->ctx.err);
    zt_spec_layout(m->gpt.dec.spec, 1);
    zt_engine_config ec = engine_config_for(o);
    if (!ec.optimizer) {
        fprintf(stderr, "muon_dump: this build has no optimizer named muon\n");
        return 1;
    }
    if (zt_engine_init(&m->eng, &m->ctx, &m->comm, m->gpt.dec.spec, &ec, zt_gpt_init_param, &m->gpt) != ZT_OK)
        return fail("engine", &m->ctx.err);
    return 0;
}

static void model_close(model *m) {
    zt_gpt_free_activations(&m->gpt, &m->eng);
    zt_engine_destroy(&m->eng);
    zt_gpt_destroy(&m->gpt);
    zt_comm_destroy(&m->comm);
    zt_ctx_destroy(&m->ctx);
}

/* ---- the steps ---------------------------------------------------------------- */

/* One step as zt-train takes it with one micro-batch: the mean loss's
 * gradients (dloss = 1/(B*T) per position), then the optimizer at lr. */
static int train_step(model *m, const int32_t *tok, const int32_t *tgt, float lr, float *loss) {
    if (zt_engine_zero_grads(&m->eng) != ZT_OK) return fail("zero_grads", &m->ctx.err);
    zt_engine_begin_micro(&m->eng, 1);
    if (zt_gpt_forward(&m->gpt, &m->eng, tok, tgt, BATCH, SEQ, loss) != ZT_OK) return fail("forward", &m->ctx.err);
    float dloss = (float)m->eng.scaler.scale / ((float)BATCH * (float)SEQ);
    if (zt_gpt_backward(&m->gpt, &m->eng, dloss) != ZT_OK) return fail("backward", &m->ctx.err);
    if (zt_engine_sync_grads(&m->eng) != ZT_OK) return fail("sync_grads", &m->ctx.err);
    if (zt_engine_step(&m->eng, lr) != ZT_OK) return fail("step", &m->ctx.err);
    if (m->eng.last_step_skipped) {
        fprintf(stderr, "muon_dump: the engine skipped a step (gradients not finite)\n");
        return 1;
    }
    return 0;
}

/* Every parameter, units in order: at world size 1, stage 0, fp32 each
 * unit's params buffer is its full fp32 values, padding-free. */
static int write_snapshot(const model *m, FILE *f) {
    const zt_model_spec *spec = m->gpt.dec.spec;
    int bad = 0;
    for (int u = 0; u < spec->nunits; u++)
        bad |= fwrite(m->eng.units[u].params.data, sizeof(float), spec->units[u].numel, f) != spec->units[u].numel;
    return bad;
}

static int run_steps(model *m, const options *o, FILE *bin, trace *tr) {
    int V = m->gpt.cfg.vocab, n = BATCH * SEQ;
    uint64_t r = o->seed ^ 0x70CE57u;
    if (write_snapshot(m, bin)) return 1;
    for (int k = 0; k < o->steps; k++) {
        int32_t *tok = tr->tokens + (size_t)k * n, *tgt = tr->targets + (size_t)k * n;
        draw_batch(&r, V, tok, tgt);
        if (train_step(m, tok, tgt, (float)o->lr, &tr->loss[k])) return 1;
        if (write_snapshot(m, bin)) return 1;
    }
    return 0;
}

/* ---- the index ------------------------------------------------------------------ */

static json_t *int_array(const int32_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *tensor_entry(const zt_unit_spec *usp, const zt_param_spec *ps, size_t base) {
    char name[72];
    snprintf(name, sizeof name, "%s.%s", usp->name, ps->name);
    json_t *shape = json_array(), *parts = json_array();
    for (int dim = 0; dim < ps->ndim; dim++) json_array_append_new(shape, json_integer(ps->shape[dim]));
    for (int k = 0; ps->hidden && k < ps->nparts; k++) json_array_append_new(parts, json_integer(ps->part_rows[k]));
    /* parts: the rows of each logical matrix Muon transforms; empty: AdamW's */
    return json_pack("{s:s,s:o,s:I,s:b,s:o}", "name", name, "shape", shape, "value", (json_int_t)(base + ps->offset),
                     "decay", ps->decay, "parts", parts);
}

static json_t *tensors_index(const zt_model_spec *spec) {
    json_t *a = json_array();
    size_t base = 0;
    for (int u = 0; u < spec->nunits; u++) {
        for (int k = 0; k < spec->units[u].nparams; k++)
            json_array_append_new(a, tensor_entry(&spec->units[u], &spec->units[u].params[k], base));
        base += spec->units[u].numel;
    }
    return a;
}

/* The optimizer's settings as the engine holds them (fp32, widened). */
static json_t *optimizer_index(const zt_engine_config *c, double lr) {
    json_t *coef = json_array();
    for (int k = 0; k < 3; k++) json_array_append_new(coef, json_real(c->muon_ns_coef[k]));
    return json_pack("{s:s,s:f,s:f,s:b,s:i,s:o,s:f,s:s,s:f,s:f,s:f,s:f,s:f,s:f}", "name", "muon", "lr",
                     (double)(float)lr, "momentum", (double)c->muon_momentum, "nesterov", c->muon_nesterov,
                     "ns_steps", c->muon_ns_steps, "ns_coefficients", coef, "muon_eps", (double)c->muon_eps,
                     "adjust_lr", c->muon_adjust_lr == ZT_MUON_ADJUST_ORIGINAL ? "original" : "match_rms_adamw",
                     "adamw_lr_scale", (double)c->muon_adamw_lr_scale, "beta1", (double)c->beta1, "beta2",
                     (double)c->beta2, "eps", (double)c->eps, "weight_decay", (double)c->weight_decay, "grad_clip",
                     (double)c->grad_clip);
}

static json_t *steps_index(const trace *tr, int steps) {
    json_t *tok = json_array(), *tgt = json_array(), *loss = json_array();
    for (int k = 0; k < steps; k++) {
        json_array_append_new(tok, int_array(tr->tokens + (size_t)k * BATCH * SEQ, BATCH * SEQ));
        json_array_append_new(tgt, int_array(tr->targets + (size_t)k * BATCH * SEQ, BATCH * SEQ));
        json_array_append_new(loss, json_real(tr->loss[k]));
    }
    return json_pack("{s:o,s:o,s:o}", "tokens", tok, "targets", tgt, "loss", loss);
}

static int write_index(const model *m, const options *o, const trace *tr, const char *bin, const char *path) {
    const zt_gpt_config *g = &m->gpt.cfg;
    const char *slash = strrchr(bin, '/'); /* the bin's name without its folder: the two travel together */
    json_t *root = json_pack("{s:{s:i,s:i,s:i,s:i,s:i,s:b,s:f},s:i,s:i,s:i,s:I,s:s}", "settings", "layers",
                             g->layers, "d_model", g->d_model, "heads", g->heads, "seq_len", g->seq_len, "vocab",
                             g->vocab, "tied", g->tied, "layernorm_eps", 1e-5, "B", BATCH, "T", SEQ, "steps",
                             o->steps, "snapshot_numel", (json_int_t)m->gpt.dec.spec->total_numel, "bin",
                             slash ? slash + 1 : bin);
    json_object_set_new(root, "optimizer", optimizer_index(&m->eng.cfg, o->lr));
    json_object_update_new(root, steps_index(tr, o->steps));
    json_object_set_new(root, "tensors", tensors_index(m->gpt.dec.spec));
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) != 0;
    if (rc) fprintf(stderr, "muon_dump: cannot write %s\n", path);
    json_decref(root);
    return rc;
}

/* ---- main -------------------------------------------------------------------- */

static int run(const options *o) {
    char bin[1024], idx[1024];
    snprintf(bin, sizeof bin, "%s.bin", o->out);
    snprintf(idx, sizeof idx, "%s.json", o->out);
    size_t n = (size_t)o->steps * BATCH * SEQ;
    trace tr = {malloc(n * sizeof(int32_t)), malloc(n * sizeof(int32_t)), malloc((size_t)o->steps * sizeof(float))};
    FILE *f = fopen(bin, "wb");
    int rc = !tr.tokens || !tr.targets || !tr.loss || !f;
    if (!f) perror(bin);
    model m;
    if (!rc && !(rc = model_open(&m, o))) { /* a half-opened model is left to the exit */
        rc = run_steps(&m, o, f, &tr);
        if (!rc) rc = write_index(&m, o, &tr, bin, idx);
        model_close(&m);
    }
    if (f && fclose(f) != 0 && !rc) {
        fprintf(stderr, "muon_dump: cannot write %s\n", bin);
        rc = 1;
    }
    if (!rc) printf("muon_dump: %s.{json,bin}: %d steps, loss %.7g -> %.7g\n", o->out, o->steps, (double)tr.loss[0],
                    (double)tr.loss[o->steps - 1]);
    free(tr.tokens);
    free(tr.targets);
    free(tr.loss);
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
