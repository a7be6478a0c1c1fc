/* The fp16 loss scaler's rules (DeepSpeed's DynamicLossScaler: halve after
 * `hysteresis` overflows, double after `window` clean steps, reset the
 * hysteresis only when the scale grows). */
#include <math.h>

#include "zt_engine.h"

int zt_loss_scaler_dynamic(const zt_engine_config *cfg) { return cfg->dtype == ZT_FP16 && cfg->loss.loss_scale == 0.0; }

zt_loss_scaler zt_loss_scaler_initial(const zt_engine_config *cfg) {
    zt_loss_scaler s = {1.0, 0, 1, 0, 0, 0};
    if (cfg->dtype != ZT_FP16) return s;
    s.scale = zt_loss_scaler_dynamic(cfg) ? ldexp(1.0, cfg->loss.initial_scale_power) : cfg->loss.loss_scale;
    s.hysteresis_left = cfg->loss.hysteresis;
    return s;
}

void zt_loss_scaler_update(zt_loss_scaler *s, const zt_engine_config *cfg, int finite) {
    s->exhausted = 0;
    if (!finite) {
        s->skipped_steps++;
        s->consecutive_skips++;
        if (!zt_loss_scaler_dynamic(cfg)) return;
        s->good_steps = 0;
        if (s->hysteresis_left > 1) {
            s->hysteresis_left--;
            return;
        }
        if (s->scale / 2.0 < cfg->loss.min_loss_scale) {
            s->exhausted = 1; /* the caller stops: a lower scale is not allowed */
            return;
        }
        s->scale /= 2.0;
        return;
    }
    s->consecutive_skips = 0;
    if (!zt_loss_scaler_dynamic(cfg)) return;
    if (++s->good_steps >= cfg->loss.window) {
        s->scale *= 2.0;
        s->good_steps = 0;
        s->hysteresis_left = cfg->loss.hysteresis;
    }
}
