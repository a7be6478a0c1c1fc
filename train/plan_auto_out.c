/* What zt-plan prints of the step-time model: the prediction of one
 * configuration (a text line, a JSON object), and --auto's choice, its
 * reasons and the best candidates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_auto_out.h"

json_t *zt_time_pred_json(const zt_time_pred *t, const zt_time_profile *prof) {
    json_t *o = json_object();
    const struct { const char *k; double v; } f[] = {
        {"predicted_step_s", t->step_s}, {"tokens_per_s", t->tokens_per_s}, {"compute_s", t->compute_s},
        {"recompute_s", t->recompute_s}, {"comm_s", t->comm_s}, {"comm_exposed_s", t->comm_exposed_s},
        {"optimizer_s", t->optimizer_s}, {"transfer_s", t->transfer_s},
        {"transfer_exposed_s", t->transfer_exposed_s}, {"flops", t->flops}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) json_object_set_new(o, f[i].k, json_real(f[i].v));
    json_object_set_new(o, "profile", json_string(prof->source));
    json_object_set_new(o, "profile_measured", json_boolean(prof->measured));
    return o;
}

void zt_time_pred_print(const zt_time_pred *t, const zt_time_profile *prof) {
    printf("  step time (predicted): %.3f ms, %.0f tokens/s: compute %.3f ms (recomputation %.3f), collectives "
           "%.3f ms (%.3f on the path), optimizer %.3f ms, copies %.3f ms (%.3f on the path)\n",
           1e3 * t->step_s, t->tokens_per_s, 1e3 * t->compute_s, 1e3 * t->recompute_s, 1e3 * t->comm_s,
           1e3 * t->comm_exposed_s, 1e3 * t->optimizer_s, 1e3 * t->transfer_s, 1e3 * t->transfer_exposed_s);
    printf("    rates from %s%s\n", prof->source, prof->measured ? "" : " (not measured on this machine)");
}

/* The flags string as a JSON array of its words. */
static json_t *flags_json(const char *flags) {
    json_t *a = json_array();
    char buf[ZT_AUTO_FLAGS_LEN];
    snprintf(buf, sizeof buf, "%s", flags);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        json_array_append_new(a, json_string(w));
    return a;
}

static json_t *candidate_json(const zt_auto_candidate *c, const zt_time_profile *prof) {
    json_t *o = json_object();
    json_object_set_new(o, "flags", flags_json(c->flags));
    json_object_set_new(o, "predicted_peak_bytes", json_integer((json_int_t)c->reserved_bytes));
    json_object_set_new(o, "allocated_peak_bytes", json_integer((json_int_t)c->peak_bytes));
    json_object_set_new(o, "host_bytes", json_integer((json_int_t)c->host_bytes));
    json_object_set_new(o, "peak_replayed", json_boolean(c->replayed));
    json_object_set_new(o, "predicted_step_s", json_real(c->time.step_s));
    json_object_set_new(o, "tokens_per_s", json_real(c->time.tokens_per_s));
    json_object_set_new(o, "time", zt_time_pred_json(&c->time, prof));
    return o;
}

void zt_auto_print_json(const zt_auto_result *r, const zt_time_profile *prof) {
    json_t *o = json_object(), *cands = json_array(), *why = json_array();
    for (int i = 0; i < r->nbest; i++) json_array_append_new(cands, candidate_json(&r->best[i], prof));
    for (int i = 0; i < r->nreasons; i++) json_array_append_new(why, json_string(r->reasons[i]));
    json_object_set_new(o, "chosen", r->nbest ? candidate_json(&r->best[0], prof) : json_null());
    json_object_set_new(o, "candidates", cands);
    json_object_set_new(o, "reasons", why);
    if (!r->nbest) json_object_set_new(o, "error", json_string(r->none_fits));
    json_object_set_new(o, "evaluated", json_integer(r->evaluated));
    json_object_set_new(o, "fitting", json_integer(r->fitting));
    json_object_set_new(o, "replays", json_integer(r->replays));
    json_object_set_new(o, "search_s", json_real(r->seconds));
    json_object_set_new(o, "profile", json_string(prof->source));
    char *text = json_dumps(o, JSON_INDENT(1));
    printf("%s\n", text);
    free(text);
    json_decref(o);
}

static void mib(char *b, size_t cap, double bytes) {
    if (bytes >= 1e9) snprintf(b, cap, "%.2f GiB", bytes / (1u << 30));
    else snprintf(b, cap, "%.2f MiB", bytes / (1 << 20));
}

void zt_auto_print_text(const zt_auto_result *r, const zt_time_profile *prof) {
    printf("zt-plan --auto: %d configurations planned in %.3f s, %d fit by the closed form, %d replayed; rates "
           "from %s\n", r->evaluated, r->seconds, r->fitting, r->replays, prof->source);
    if (!r->nbest) {
        printf("  %s\n", r->none_fits);
        return;
    }
    const zt_auto_candidate *c = &r->best[0];
    char peak[32], budget[32];
    mib(peak, sizeof peak, (double)c->reserved_bytes);
    mib(budget, sizeof budget, (double)c->budget);
    printf("auto: chosen: %s\n", c->flags);
    printf("  predicted: %.3f ms a step, %.0f tokens/s, %s reserved per rank (%s) of %s\n", 1e3 * c->time.step_s,
           c->time.tokens_per_s, peak, c->replayed ? "replayed" : "closed form", budget);
    printf("  why, against each other value with the rest as chosen:\n");
    for (int i = 0; i < r->nreasons; i++) printf("    %s\n", r->reasons[i]);
    printf("  the best %d:\n", r->nbest);
    for (int i = 0; i < r->nbest; i++) {
        mib(peak, sizeof peak, (double)r->best[i].reserved_bytes);
        printf("    %2d. %9.3f ms %10.0f tokens/s %12s  %s\n", i + 1, 1e3 * r->best[i].time.step_s,
               r->best[i].time.tokens_per_s, peak, r->best[i].flags);
    }
}
