/* Learning-rate schedules (zt_lr_schedule.h). */
#include "zt_lr_schedule.h"

#include <math.h>
#include <string.h>

static double zerotrain_cosine(const zt_lr_schedule *s, int step) {
    if (step < s->warmup) return s->lr * (step + 1) / s->warmup;
    int span = s->total_steps - s->warmup;
    double progress = span > 1 ? (double)(step - s->warmup) / (double)(span - 1) : 1.0;
    double cosine = 0.5 * (1.0 + cos(M_PI * progress));
    return s->lr * (s->min_lr_frac + (1.0 - s->min_lr_frac) * cosine);
}

/* DeepSpeed's warm-up fraction at iteration it < W (W >= 2). */
static double warmup_gamma(const zt_lr_schedule *s, int it, int W) {
    return s->warmup_shape == ZT_WARMUP_LOG ? log((double)it + 1.0) / log((double)W) : (double)it / (double)W;
}

/* WarmupLR and WarmupDecayLR; before the first iteration, warmup_min_lr. */
static double deepspeed_warmup(const zt_lr_schedule *s, int it) {
    int W = s->warmup > 2 ? s->warmup : 2;
    if (it < 0) return s->warmup_min_lr;
    double gamma = 1.0;
    if (it < W) gamma = warmup_gamma(s, it, W);
    else if (s->kind == ZT_LR_WARMUP_DECAY) {
        double left = (double)(s->total_steps - it), span = (double)(s->total_steps - W);
        gamma = fmax(0.0, left / fmax(1.0, span));
    }
    return s->warmup_min_lr + (s->lr - s->warmup_min_lr) * gamma;
}

/* WarmupCosineLR; before the first iteration, 0. */
static double deepspeed_warmup_cosine(const zt_lr_schedule *s, int it) {
    int W = s->warmup > 2 ? s->warmup : 2;
    if (it < 0) return 0.0;
    if (it < W) return s->lr * (s->warmup_min_ratio + warmup_gamma(s, it, W) * (1.0 - s->warmup_min_ratio));
    double done = (double)(it - W + 1), span = (double)(s->total_steps - W);
    double ratio = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * (1.0 + cos(M_PI * done / span)) / 2.0;
    return s->lr * fmax(0.0, ratio);
}

double zt_lr_at(const zt_lr_schedule *s, int step) {
    switch (s->kind) {
    case ZT_LR_WARMUP:
    case ZT_LR_WARMUP_DECAY: return deepspeed_warmup(s, step - 1);
    case ZT_LR_WARMUP_COSINE: return deepspeed_warmup_cosine(s, step - 1);
    case ZT_LR_COSINE: break;
    }
    return zerotrain_cosine(s, step);
}

int zt_lr_kind_parse(const char *name, zt_lr_kind *kind) {
    static const char *const names[] = {"cosine", "warmup", "warmup-decay", "warmup-cosine"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return *kind = (zt_lr_kind)i, 1;
    return 0;
}
