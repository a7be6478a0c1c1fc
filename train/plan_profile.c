/* The machine profiles of the step-time model (plan_time.h): the built-in
 * tables, and the JSON file zt-plan --calibrate writes and --profile reads. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan_time.h"

static const char *const dtype_key[ZT_TIME_DTYPES] = {"fp32", "bf16", "fp16"};
static const char *const class_key[ZT_GEMM_CLASSES] = {"small", "medium", "large"};
static const char *const attn_key[2] = {"materialized", "fused"};
static const char *const dir_key[2] = {"forward", "backward"};
static const char *const link_key[2] = {"intra_node", "inter_node"};

/* This kind of machine (2 cores with AVX-512, OpenBLAS, MPI over shared
 * memory) with one rank per core, as `zt-plan --calibrate` measured it on
 * 2026-12-04 (the inter-node link: a 10 GbE guess, not measured). */
static void cpu_table(zt_time_profile *p) {
    static const double gemm[ZT_TIME_DTYPES][ZT_GEMM_CLASSES] = {
        {100e9, 120e9, 118e9}, {48e9, 60e9, 69e9}, {29e9, 36e9, 38e9}};
    memcpy(p->gemm_flops, gemm, sizeof gemm);
    p->attn_flops[0][0] = 97e9, p->attn_flops[0][1] = 148e9;
    p->attn_flops[1][0] = 97e9, p->attn_flops[1][1] = 105e9;
    p->pointwise_gbs = 6.8, p->kernel_overhead_s = 0.4e-6;
    p->adam_device_eps = 3.3e8, p->adam_host_eps = 2.3e9;
    p->coll_gbs[0] = 3.5, p->coll_gbs[1] = 1, p->coll_latency_s[0] = 1.2e-6, p->coll_latency_s[1] = 50e-6;
    p->nvme_gbs[0] = 2, p->nvme_gbs[1] = 1, p->copy_gbs = 18, p->overlap = 0.05, p->efficiency = 1;
    p->step_overhead_s = 2e-4, p->unit_overhead_s = 5e-6; /* fitted to the default model's runs at np 2 */
    p->threads = 1;
}

/* An H200 (SXM): the vendor's dense peaks (bf16 and fp16 989 TFLOP/s, fp32
 * 67, HBM 4.8 TB/s; NVLink 450 GB/s a direction; 400 Gb/s InfiniBand per
 * GPU between nodes) times the efficiency; small GEMMs and the attention
 * kernels at fractions of it, overhead per launch. */
#define CUDA_EFFICIENCY 0.6
static void cuda_table(zt_time_profile *p) {
    const double e = CUDA_EFFICIENCY, tc = 989e12 * e, f32 = 67e12 * e;
    const double gemm[ZT_TIME_DTYPES][ZT_GEMM_CLASSES] = {
        {f32 * 0.1, f32 * 0.5, f32}, {tc * 0.02, tc * 0.3, tc}, {tc * 0.02, tc * 0.3, tc}};
    memcpy(p->gemm_flops, gemm, sizeof gemm);
    p->attn_flops[0][0] = tc * 0.1, p->attn_flops[0][1] = tc * 0.08;
    p->attn_flops[1][0] = tc * 0.08, p->attn_flops[1][1] = tc * 0.05;
    p->pointwise_gbs = 4800 * e, p->kernel_overhead_s = 5e-6;
    p->adam_device_eps = 4.8e12 * e / 28; /* 16 bytes read, 12 written per fp32 element */
    p->adam_host_eps = 1e9;
    p->coll_gbs[0] = 450 * e, p->coll_gbs[1] = 50 * e, p->coll_latency_s[0] = 20e-6, p->coll_latency_s[1] = 40e-6;
    p->nvme_gbs[0] = 6, p->nvme_gbs[1] = 4, p->copy_gbs = 26, p->overlap = 0.9, p->efficiency = e;
    p->step_overhead_s = 1e-3, p->unit_overhead_s = 3e-5; /* the host's share: as on the CPU */
    p->threads = 1;
}

zt_status zt_time_profile_builtin(const char *device, zt_time_profile *p, zt_error *err) {
    memset(p, 0, sizeof *p);
    p->ranks_per_node = 1;
    if (strcmp(device, "cpu") == 0) {
        cpu_table(p);
        snprintf(p->source, sizeof p->source, "built-in cpu table (2-core machine, one rank per core; "
                 "zt-plan --calibrate measures this one)");
    } else if (strcmp(device, "cuda") == 0) {
        cuda_table(p);
        snprintf(p->source, sizeof p->source, "built-in cuda table: H200 vendor peaks x %.2f efficiency, not "
                 "measured (bench/gpu_check.sh writes a measured profile)", CUDA_EFFICIENCY);
    } else {
        return ZT_FAIL(err, ZT_ERR_INVALID, "no built-in time profile for device '%s' (cpu or cuda)", device);
    }
    snprintf(p->device, sizeof p->device, "%s", device);
    return ZT_OK;
}

static int rate_ok(double x) { return isfinite(x) && x > 0; }

zt_status zt_time_profile_check(const zt_time_profile *p, zt_error *err) {
    for (int d = 0; d < ZT_TIME_DTYPES; d++)
        for (int c = 0; c < ZT_GEMM_CLASSES; c++)
            if (!rate_ok(p->gemm_flops[d][c]))
                return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: gemm_flops.%s.%s must be a positive rate (got %g)",
                               dtype_key[d], class_key[c], p->gemm_flops[d][c]);
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++)
            if (!rate_ok(p->attn_flops[k][d]))
                return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: attention_flops.%s.%s must be a positive rate "
                               "(got %g)", attn_key[k], dir_key[d], p->attn_flops[k][d]);
    const struct { const char *name; double v; } rates[] = {
        {"pointwise_gbs", p->pointwise_gbs}, {"adam_device_eps", p->adam_device_eps},
        {"adam_host_eps", p->adam_host_eps}, {"collectives.intra_node.gbs", p->coll_gbs[0]},
        {"collectives.inter_node.gbs", p->coll_gbs[1]}, {"nvme_read_gbs", p->nvme_gbs[0]},
        {"nvme_write_gbs", p->nvme_gbs[1]}, {"copy_gbs", p->copy_gbs}, {"efficiency", p->efficiency}};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!rate_ok(rates[i].v))
            return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: %s must be positive and finite (got %g)", rates[i].name,
                           rates[i].v);
    const double lat[5] = {p->kernel_overhead_s, p->coll_latency_s[0], p->coll_latency_s[1], p->step_overhead_s,
                           p->unit_overhead_s};
    for (int i = 0; i < 5; i++)
        if (!isfinite(lat[i]) || lat[i] < 0 || lat[i] > 1)
            return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: a latency or overhead must be in [0, 1] s (got %g)",
                           lat[i]);
    if (!(p->overlap >= 0 && p->overlap <= 1))
        return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: overlap must be in [0, 1] (got %g)", p->overlap);
    if (strcmp(p->device, "cpu") != 0 && strcmp(p->device, "cuda") != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "time profile: device must be cpu or cuda (got '%s')", p->device);
    return ZT_OK;
}

static json_t *profile_json(const zt_time_profile *p) {
    json_t *o = json_object(), *g = json_object(), *a = json_object(), *c = json_object();
    for (int d = 0; d < ZT_TIME_DTYPES; d++) {
        json_t *row = json_object();
        for (int k = 0; k < ZT_GEMM_CLASSES; k++) json_object_set_new(row, class_key[k], json_real(p->gemm_flops[d][k]));
        json_object_set_new(g, dtype_key[d], row);
    }
    for (int k = 0; k < 2; k++)
        json_object_set_new(a, attn_key[k], json_pack("{s:f,s:f}", dir_key[0], p->attn_flops[k][0], dir_key[1],
                                                      p->attn_flops[k][1]));
    for (int l = 0; l < 2; l++)
        json_object_set_new(c, link_key[l], json_pack("{s:f,s:f}", "gbs", p->coll_gbs[l], "latency_s",
                                                      p->coll_latency_s[l]));
    json_object_set_new(o, "zt_time_profile", json_integer(1));
    json_object_set_new(o, "device", json_string(p->device));
    json_object_set_new(o, "source", json_string(p->source));
    json_object_set_new(o, "measured", json_boolean(p->measured));
    json_object_set_new(o, "ranks_per_node", json_integer(p->ranks_per_node));
    json_object_set_new(o, "threads", json_integer(p->threads));
    json_object_set_new(o, "gemm_flops", g);
    json_object_set_new(o, "attention_flops", a);
    json_object_set_new(o, "collectives", c);
    const struct { const char *k; double v; } rest[] = {
        {"pointwise_gbs", p->pointwise_gbs}, {"kernel_overhead_s", p->kernel_overhead_s},
        {"adam_device_eps", p->adam_device_eps}, {"adam_host_eps", p->adam_host_eps},
        {"nvme_read_gbs", p->nvme_gbs[0]}, {"nvme_write_gbs", p->nvme_gbs[1]}, {"copy_gbs", p->copy_gbs},
        {"overlap", p->overlap}, {"efficiency", p->efficiency}, {"step_overhead_s", p->step_overhead_s},
        {"unit_overhead_s", p->unit_overhead_s}};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) json_object_set_new(o, rest[i].k, json_real(rest[i].v));
    return o;
}

zt_status zt_time_profile_save(const char *path, const zt_time_profile *p, zt_error *err) {
    ZT_TRY(zt_time_profile_check(p, err));
    json_t *o = profile_json(p);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(o, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (rc != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return ZT_FAIL(err, ZT_ERR_IO, "time profile: cannot write '%s'", path);
    }
    return ZT_OK;
}

/* A number at o.k (a missing or non-numeric field is NaN: check names it). */
static double num(json_t *o, const char *k) {
    json_t *v = o ? json_object_get(o, k) : NULL;
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void read_fields(json_t *o, zt_time_profile *p) {
    json_t *g = json_object_get(o, "gemm_flops"), *a = json_object_get(o, "attention_flops");
    json_t *c = json_object_get(o, "collectives");
    for (int d = 0; d < ZT_TIME_DTYPES; d++)
        for (int k = 0; k < ZT_GEMM_CLASSES; k++) p->gemm_flops[d][k] = num(json_object_get(g, dtype_key[d]), class_key[k]);
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++) p->attn_flops[k][d] = num(json_object_get(a, attn_key[k]), dir_key[d]);
    for (int l = 0; l < 2; l++) {
        p->coll_gbs[l] = num(json_object_get(c, link_key[l]), "gbs");
        p->coll_latency_s[l] = num(json_object_get(c, link_key[l]), "latency_s");
    }
    p->pointwise_gbs = num(o, "pointwise_gbs"), p->kernel_overhead_s = num(o, "kernel_overhead_s");
    p->adam_device_eps = num(o, "adam_device_eps"), p->adam_host_eps = num(o, "adam_host_eps");
    p->nvme_gbs[0] = num(o, "nvme_read_gbs"), p->nvme_gbs[1] = num(o, "nvme_write_gbs");
    p->copy_gbs = num(o, "copy_gbs"), p->overlap = num(o, "overlap"), p->efficiency = num(o, "efficiency");
    p->step_overhead_s = num(o, "step_overhead_s"), p->unit_overhead_s = num(o, "unit_overhead_s");
    double rpn = num(o, "ranks_per_node"), th = num(o, "threads");
    p->ranks_per_node = rpn >= 1 && rpn < 1e6 ? (int)rpn : 1;
    p->threads = th >= 1 && th < 1e6 ? (int)th : 1;
    p->measured = json_is_true(json_object_get(o, "measured"));
}

zt_status zt_time_profile_load(const char *path, zt_time_profile *p, zt_error *err) {
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) return ZT_FAIL(err, ZT_ERR_INVALID, "--profile %s: not a JSON file (%s, line %d)", path, je.text, je.line);
    memset(p, 0, sizeof *p);
    zt_status st = ZT_OK;
    const char *dev = json_string_value(json_object_get(o, "device"));
    if (!json_is_object(o) || json_integer_value(json_object_get(o, "zt_time_profile")) != 1)
        st = ZT_FAIL(err, ZT_ERR_INVALID, "--profile %s: not a time profile of version 1 (zt-plan --calibrate "
                     "writes one)", path);
    else if (!dev)
        st = ZT_FAIL(err, ZT_ERR_INVALID, "--profile %s: no \"device\" (cpu or cuda)", path);
    if (st == ZT_OK) {
        snprintf(p->device, sizeof p->device, "%s", dev);
        const char *src = json_string_value(json_object_get(o, "source"));
        snprintf(p->source, sizeof p->source, "%s (%s)", path, src ? src : "no source given");
        read_fields(o, p);
        zt_error why = {0};
        if (zt_time_profile_check(p, &why) != ZT_OK)
            st = ZT_FAIL(err, ZT_ERR_INVALID, "--profile %s: %s", path, why.msg);
    }
    json_decref(o);
    return st;
}
