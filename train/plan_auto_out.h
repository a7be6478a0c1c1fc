/* zt-plan's output of the step-time model and of --auto (plan_auto.h). */
#ifndef ZT_PLAN_AUTO_OUT_H
#define ZT_PLAN_AUTO_OUT_H

#include <jansson.h>

#include "plan_auto.h"

/* {"predicted_step_s", "tokens_per_s", "compute_s", ..., "profile"} */
json_t *zt_time_pred_json(const zt_time_pred *t, const zt_time_profile *prof);
void zt_time_pred_print(const zt_time_pred *t, const zt_time_profile *prof);
/* {"chosen": {"flags", "predicted_peak_bytes", "predicted_step_s", "tokens_per_s", ...}, "candidates", "reasons"} */
void zt_auto_print_json(const zt_auto_result *r, const zt_time_profile *prof);
void zt_auto_print_text(const zt_auto_result *r, const zt_time_profile *prof);

#endif
