/* Learning-rate schedules: zerotrain's own (linear warm-up, then cosine
 * decay to a floor at the last step) and DeepSpeed's WarmupLR,
 * WarmupDecayLR and WarmupCosineLR with their parameters and their timing:
 * DeepSpeed steps its scheduler after the optimizer, from iteration -1, so
 * optimizer step s (0-based) runs at the schedule's iteration s - 1. */
#ifndef ZT_LR_SCHEDULE_H
#define ZT_LR_SCHEDULE_H

typedef enum {
    ZT_LR_COSINE = 0,   /* zerotrain's: warm-up to lr, cosine to min_lr_frac x lr at total_steps - 1 */
    ZT_LR_WARMUP,       /* WarmupLR: warmup_min_lr to lr over `warmup` iterations, then lr */
    ZT_LR_WARMUP_DECAY, /* WarmupDecayLR: the same, then linear to 0 at total_steps */
    ZT_LR_WARMUP_COSINE /* WarmupCosineLR: lr x a ratio from warmup_min_ratio up to 1, cosine to cos_min_ratio */
} zt_lr_kind;

typedef enum { ZT_WARMUP_LOG = 0, ZT_WARMUP_LINEAR } zt_warmup_shape;

typedef struct {
    zt_lr_kind kind;
    double lr;               /* the peak (WarmupLR's warmup_max_lr; WarmupCosineLR's optimizer lr) */
    int warmup;              /* warm-up steps (DeepSpeed's warmup_num_steps, at least 2 there) */
    int total_steps;         /* the schedule's length (DeepSpeed's total_num_steps) */
    double min_lr_frac;      /* ZT_LR_COSINE: the final lr over lr */
    zt_warmup_shape warmup_shape; /* DeepSpeed's warmup_type: log (their default) or linear */
    double warmup_min_lr;    /* WarmupLR, WarmupDecayLR: where the warm-up starts */
    double warmup_min_ratio; /* WarmupCosineLR: where the warm-up starts, over lr */
    double cos_min_ratio;    /* WarmupCosineLR: where the cosine ends, over lr */
} zt_lr_schedule;

/* The learning rate of optimizer step `step` (0-based). */
double zt_lr_at(const zt_lr_schedule *s, int step);
/* "cosine", "warmup", "warmup-decay", "warmup-cosine"; 0 for another name. */
int zt_lr_kind_parse(const char *name, zt_lr_kind *kind);

#endif
