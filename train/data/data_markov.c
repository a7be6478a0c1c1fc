/* A seeded random order-k Markov source whose entropy rate is computed exactly
 * from its stationary distribution, so the best achievable loss is known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "zt_rng.h"

static double entropy_of(const double *p, size_t n) {
    double h = 0.0;
    for (size_t i = 0; i < n; i++)
        if (p[i] > 0.0) h -= p[i] * log(p[i]);
    return h;
}

/* The source's tables, and the scratch `next` [ncontexts] and `probs`
 * [branch] the construction needs; on failure nothing stays allocated. */
static zt_status alloc_tables(zt_data *d, double **next, double **probs, zt_error *err) {
    size_t nc = d->ncontexts, nb = (size_t)d->branch;
    d->succ = malloc(nc * nb * sizeof *d->succ);
    d->succ_cdf = malloc(nc * nb * sizeof *d->succ_cdf);
    d->stationary = malloc(nc * sizeof *d->stationary);
    d->stat_cdf = malloc(nc * sizeof *d->stat_cdf);
    *next = malloc(nc * sizeof **next);
    *probs = malloc(nb * sizeof **probs);
    if (!d->succ || !d->succ_cdf || !d->stationary || !d->stat_cdf || !*next || !*probs) {
        free(*next);
        free(*probs);
        zt_data_destroy(d);
        return ZT_FAIL(err, ZT_ERR_OOM, "markov source: cannot allocate tables");
    }
    return ZT_OK;
}

/* One context's successors: nb distinct tokens in succ [nb] with skewed
 * random weights, their cumulative probabilities in cdf [nb]. */
static void draw_successors(zt_rng *r, int vocab, size_t nb, int32_t *succ, double *cdf, double *probs) {
    double total = 0.0;
    for (size_t j = 0; j < nb; j++) {
        int32_t tok;
        int dup;
        do {
            tok = (int32_t)zt_rng_below(r, (uint32_t)vocab);
            dup = 0;
            for (size_t i = 0; i < j; i++) dup |= succ[i] == tok;
        } while (dup);
        succ[j] = tok;
        double u = zt_rng_uniform_d(r);
        probs[j] = u * u + 0.05;
        total += probs[j];
    }
    double acc = 0.0;
    for (size_t j = 0; j < nb; j++) {
        probs[j] /= total;
        acc += probs[j];
        cdf[j] = acc;
    }
    cdf[nb - 1] = 1.0;
}

/* One step of find_stationary's iteration, with next [ncontexts] as
 * scratch; returns the L1 change of pi. */
static double lazy_power_step(zt_data *d, double *next) {
    size_t nc = d->ncontexts, nb = (size_t)d->branch;
    memset(next, 0, nc * sizeof *next);
    for (size_t c = 0; c < nc; c++) {
        double prev = 0.0;
        for (size_t j = 0; j < nb; j++) {
            double q = d->succ_cdf[c * nb + j] - prev;
            prev = d->succ_cdf[c * nb + j];
            size_t nxt = (c * (size_t)d->vocab + (size_t)d->succ[c * nb + j]) % nc;
            next[nxt] += d->stationary[c] * q;
        }
    }
    double diff = 0.0;
    for (size_t c = 0; c < nc; c++) {
        double v = 0.5 * (d->stationary[c] + next[c]);
        diff += fabs(v - d->stationary[c]);
        d->stationary[c] = v;
    }
    return diff;
}

/* Stationary distribution by lazy power iteration (pi <- (pi + pi P) / 2
 * converges even for a periodic chain and has the same fixed point). */
static void find_stationary(zt_data *d, double *next) {
    size_t nc = d->ncontexts;
    for (size_t c = 0; c < nc; c++) d->stationary[c] = 1.0 / (double)nc;
    for (int it = 0; it < 100000; it++)
        if (lazy_power_step(d, next) < 1e-14) break;
}

/* From the stationary law: the entropy rate, the start contexts' cdf and
 * the entropies of the first k tokens and of the first token alone; next
 * [ncontexts] and probs [branch] are scratch. */
static void stationary_entropies(zt_data *d, double *next, double *probs) {
    size_t nc = d->ncontexts, nb = (size_t)d->branch;
    double rate = 0.0, acc = 0.0;
    for (size_t c = 0; c < nc; c++) {
        double prev = 0.0;
        for (size_t j = 0; j < nb; j++) {
            probs[j] = d->succ_cdf[c * nb + j] - prev;
            prev = d->succ_cdf[c * nb + j];
        }
        rate += d->stationary[c] * entropy_of(probs, nb);
        acc += d->stationary[c];
        d->stat_cdf[c] = acc;
    }
    d->stat_cdf[nc - 1] = 1.0;
    d->entropy_rate = rate;
    d->start_entropy = entropy_of(d->stationary, nc);
    /* The first token of a context is its most significant base-V digit. */
    memset(next, 0, (size_t)d->vocab * sizeof *next);
    size_t stride = nc / (size_t)d->vocab;
    for (size_t c = 0; c < nc; c++) next[c / stride] += d->stationary[c];
    d->first_token_entropy = entropy_of(next, (size_t)d->vocab);
}

zt_status zt_data_markov_create(zt_data *d, int vocab, int order, int branch, uint64_t seed, zt_error *err) {
    memset(d, 0, sizeof *d);
    d->kind = ZT_DATA_MARKOV;
    if (vocab < 2 || order < 1 || branch < 1 || branch > vocab)
        return ZT_FAIL(err, ZT_ERR_INVALID, "markov source: need vocab >= 2, order >= 1, 1 <= branch <= vocab");
    double nctx = pow((double)vocab, (double)order);
    if (nctx > (double)(1u << 22))
        return ZT_FAIL(err, ZT_ERR_INVALID, "markov source: vocab^order = %.0f contexts is too many (max 4194304)", nctx);
    d->vocab = vocab;
    d->order = order;
    d->branch = branch;
    d->ncontexts = (size_t)nctx;
    double *next, *probs; /* [ncontexts], [branch] scratch */
    ZT_TRY(alloc_tables(d, &next, &probs, err));

    /* Successors: `branch` distinct tokens with skewed random weights. */
    zt_rng r = zt_rng_keyed(seed, 0x6d61726bu, (uint64_t)vocab, (uint64_t)order);
    size_t nb = (size_t)branch;
    for (size_t c = 0; c < d->ncontexts; c++)
        draw_successors(&r, vocab, nb, d->succ + c * nb, d->succ_cdf + c * nb, probs);
    find_stationary(d, next);
    stationary_entropies(d, next, probs);
    free(next);
    free(probs);
    return ZT_OK;
}

static size_t sample_cdf(const double *cdf, size_t n, double u) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

void zt_data_batch(const zt_data *d, uint64_t seed, int rank, int64_t step, int micro, int B, int T,
                   int32_t *tokens, int32_t *targets) {
    for (int b = 0; b < B; b++) {
        zt_rng r = zt_rng_keyed(seed ^ 0xda7au, (uint64_t)rank, (uint64_t)step, (uint64_t)micro * 65536u + (uint64_t)b);
        int32_t *in = tokens + (size_t)b * T, *out = targets + (size_t)b * T;
        if (d->kind == ZT_DATA_FILE) {
            size_t span = d->nbytes - (size_t)T; /* checked >= 1 at load */
            size_t off = (size_t)(zt_rng_u64(&r) % span);
            for (int t = 0; t < T; t++) {
                in[t] = d->bytes[off + (size_t)t];
                out[t] = d->bytes[off + (size_t)t + 1];
            }
            continue;
        }
        size_t nc = d->ncontexts, V = (size_t)d->vocab;
        size_t ctx = sample_cdf(d->stat_cdf, nc, zt_rng_uniform_d(&r));
        /* Emit the start context's k tokens, most significant digit first. */
        int32_t window[64];
        size_t c = ctx;
        for (int i = d->order - 1; i >= 0; i--) {
            window[i] = (int32_t)(c % V);
            c /= V;
        }
        for (int t = 0; t <= T; t++) {
            int32_t tok;
            if (t < d->order) {
                tok = window[t];
            } else {
                const double *cdf = d->succ_cdf + ctx * (size_t)d->branch;
                size_t j = sample_cdf(cdf, (size_t)d->branch, zt_rng_uniform_d(&r));
                tok = d->succ[ctx * (size_t)d->branch + j];
                ctx = (ctx * V + (size_t)tok) % nc;
            }
            if (t < T) in[t] = tok;
            if (t > 0) out[t - 1] = tok;
        }
    }
}

double zt_data_loss_floor(const zt_data *d, int T) {
    if (d->kind != ZT_DATA_MARKOV) return NAN;
    /* Targets are tokens 1..T. Tokens 1..k-1 are predicted from part of the
     * start context: H(x_0..x_{k-1}) - H(x_0) in total; every later token
     * sees k tokens of context and costs the entropy rate. */
    int k = d->order;
    if (k - 1 >= T) return (d->start_entropy - d->first_token_entropy) / T; /* not reached: order < T */
    double total = (d->start_entropy - d->first_token_entropy) + (double)(T - (k - 1)) * d->entropy_rate;
    return total / (double)T;
}

void zt_data_destroy(zt_data *d) {
    free(d->succ);
    free(d->succ_cdf);
    free(d->stationary);
    free(d->stat_cdf);
    free(d->bytes);
    zt_token_files_close(&d->files);
    memset(d, 0, sizeof *d);
}
