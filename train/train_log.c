#include "train_log.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "zt_comm.h"
#include "zt_imbalance.h"
#include "seq_group.h"

json_t *zt_mem_step_json(const zt_mem *dev, const zt_mem *host, size_t driver_used, size_t driver_total) {
    json_t *o = json_object();
    json_t *cur = json_object(), *peak = json_object(), *phase = json_object();
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++) {
        json_object_set_new(cur, zt_category_name(c), json_integer((json_int_t)dev->by_category[c].current));
        json_object_set_new(peak, zt_category_name(c), json_integer((json_int_t)dev->window_cat_peak[c]));
    }
    for (int p = 0; p < ZT_NUM_PHASES; p++)
        json_object_set_new(phase, zt_phase_name(p), json_integer((json_int_t)dev->window_phase_peak[p]));
    json_object_set_new(o, "peak_bytes", json_integer((json_int_t)dev->window_allocated_peak));
    json_object_set_new(o, "peak_by_phase", phase);
    json_object_set_new(o, "current_by_category", cur);
    json_object_set_new(o, "peak_by_category", peak);
    json_object_set_new(o, "allocated_bytes", json_integer((json_int_t)dev->allocated.current));
    json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)dev->reserved.current));
    json_object_set_new(o, "reserved_peak_bytes", json_integer((json_int_t)dev->window_reserved_peak));
    double frag = dev->reserved.current
                      ? (double)(dev->reserved.current - dev->allocated.current) / (double)dev->reserved.current
                      : 0.0;
    json_object_set_new(o, "fragmentation", json_real(frag));
    /* At the step's peak, where a full device would feel it. */
    double frag_peak = dev->window_reserved_peak ? (double)(dev->window_reserved_peak - dev->window_allocated_peak) /
                                                        (double)dev->window_reserved_peak
                                                  : 0.0;
    json_object_set_new(o, "fragmentation_at_peak", json_real(frag_peak));
    /* What the free bytes inside reserved look like: one large block, or
     * many that no request of the size of the largest can use. */
    zt_free_stats fs = zt_mem_free_stats(dev);
    json_object_set_new(o, "allocator", json_string(zt_alloc_mode_name(dev->mode)));
    json_object_set_new(o, "largest_free_block_bytes", json_integer((json_int_t)fs.largest_free));
    json_object_set_new(o, "free_blocks", json_integer((json_int_t)fs.free_blocks));
    json_object_set_new(o, "segments", json_integer((json_int_t)fs.segments));
    json_object_set_new(o, "alloc_count", json_integer((json_int_t)dev->alloc_count));
    json_object_set_new(o, "host_bytes", json_integer((json_int_t)host->allocated.current));
    json_object_set_new(o, "host_peak_bytes", json_integer((json_int_t)host->allocated.peak));
    json_t *hcur = json_object();
    for (int c = 0; c < ZT_NUM_CATEGORIES; c++)
        if (host->by_category[c].peak)
            json_object_set_new(hcur, zt_category_name(c), json_integer((json_int_t)host->by_category[c].current));
    json_object_set_new(o, "host_by_category", hcur);
    zt_error ignore = {0};
    /* The driver's view (cudaMemGetInfo) beside the allocator's: used covers
     * the cached blocks, the CUDA context, cuBLAS workspaces and NCCL buffers
     * and any other process on the GPU. Absent on the CPU. */
    if (driver_total > 0) {
        json_t *dj = json_object();
        json_object_set_new(dj, "used_bytes", json_integer((json_int_t)driver_used));
        json_object_set_new(dj, "total_bytes", json_integer((json_int_t)driver_total));
        json_object_set_new(o, "driver", dj);
    }
    zt_os_mem os;
    if (zt_os_mem_read(&os, &ignore) == ZT_OK) {
        json_t *osj = json_object();
        json_object_set_new(osj, "vm_rss", json_integer((json_int_t)os.vm_rss));
        json_object_set_new(osj, "vm_hwm", json_integer((json_int_t)os.vm_hwm));
        json_object_set_new(o, "os", osj);
    }
    return o;
}

zt_status zt_jsonl_open(const char *dir, int rank, FILE **out, zt_error *err) {
    ZT_TRY(zt_mkdir_p(dir, err));
    char path[1100];
    snprintf(path, sizeof path, "%s/rank%d.jsonl", dir, rank);
    *out = fopen(path, "w");
    if (!*out) return ZT_FAIL(err, ZT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return ZT_OK;
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The imbalance grouped by node: each node's ranks, the highest and mean of
 * their peaks and their sum (what the node's devices hold together). */
static json_t *imbalance_by_node(const zt_summary *s) {
    json_t *nodes = json_array();
    for (int n = 0; n < s->nnodes; n++) {
        json_t *ranks = json_array();
        size_t most = 0, sum = 0;
        const char *host = "";
        for (int r = 0; r < s->world_size; r++) {
            if (s->rank_node[r] != n) continue;
            json_array_append_new(ranks, json_integer(r));
            most = s->rank_peak[r] > most ? s->rank_peak[r] : most;
            sum += s->rank_peak[r];
            host = s->rank_host + (size_t)r * ZT_HOST_NAME;
        }
        size_t count = json_array_size(ranks);
        json_array_append_new(nodes, json_pack("{s:i,s:s,s:o,s:I,s:f,s:I}", "node", n, "host", host, "ranks", ranks,
                                               "peak_max_bytes", (json_int_t)most, "peak_mean_bytes",
                                               count ? (double)sum / (double)count : 0.0, "peak_sum_bytes",
                                               (json_int_t)sum));
    }
    return nodes;
}

/* Each node's host memory: its ranks' Pss summed (shared pages counted
 * once among them) against what the node allows. */
static json_t *host_memory_by_node(const zt_summary *s) {
    json_t *nodes = json_array();
    for (int n = 0; n < s->nnodes; n++) {
        size_t pss = 0, limit = 0;
        int measured = 1;
        for (int r = 0; r < s->world_size; r++) {
            if (s->rank_node[r] != n) continue;
            json_t *proc = s->rank_process ? json_array_get(s->rank_process, (size_t)r) : NULL;
            json_t *p = proc ? json_object_get(proc, "pss_bytes") : NULL;
            if (p) pss += (size_t)json_integer_value(p);
            else measured = 0;
            if (s->rank_node_limit) limit = s->rank_node_limit[r];
        }
        json_t *o = json_object();
        json_object_set_new(o, "node", json_integer(n));
        json_object_set_new(o, "pss_bytes", measured ? json_integer((json_int_t)pss) : json_null());
        json_object_set_new(o, "limit_bytes", limit ? json_integer((json_int_t)limit) : json_null());
        json_array_append_new(nodes, o);
    }
    return nodes;
}

zt_status zt_summary_write(const zt_summary *s, const char *dir, zt_error *err) {
    const zt_train_config *c = s->cfg;
    json_t *o = json_object();
    json_object_set_new(o, "world_size", json_integer(s->world_size));
    if (s->model) json_object_set(o, "model", s->model);
    json_object_set_new(o, "stage", json_integer(c->stage));
    json_object_set_new(o, "offload", json_string(c->offload));
    json_object_set_new(o, "recompute", json_string(c->recompute));
    json_object_set_new(o, "offload_activations", json_string(c->offload_activations));
    json_object_set_new(o, "attention", json_string(c->attention));
    json_object_set_new(o, "dtype", json_string(c->dtype));
    json_object_set_new(o, "reduce_dtype", json_string(c->reduce_dtype));
    json_object_set_new(o, "quantize_weights", json_string(c->quantize_weights));
    json_object_set_new(o, "quantize_grads", json_string(c->quantize_grads));
    json_object_set_new(o, "device", json_string(c->device));
    json_object_set_new(o, "params", json_integer((json_int_t)s->params));
    json_object_set_new(o, "steps", json_integer(s->steps));
    json_object_set_new(o, "start_step", json_integer(s->start_step));
    json_object_set_new(o, "stop_step", json_integer(s->stop_step));
    json_object_set_new(o, "stop_reason", json_string(s->stop_reason));
    json_t *losses = json_array();
    int ran = s->stop_step - s->start_step;
    for (int i = 0; i < ran; i++) json_array_append_new(losses, json_real(s->losses[i]));
    json_object_set_new(o, "losses", losses);
    json_object_set_new(o, "final_loss", ran > 0 ? json_real(s->losses[ran - 1]) : json_null());
    json_object_set_new(o, "data_entropy", real_or_null(s->data_entropy));
    json_object_set_new(o, "tokens_per_s", real_or_null(s->tokens_per_s));
    json_object_set_new(o, "step_time_s", real_or_null(s->step_time_median_s));
    json_object_set_new(o, "predicted_step_s", real_or_null(s->predicted_step_s));
    json_object_set_new(o, "predicted_profile", s->predicted_profile ? json_string(s->predicted_profile) : json_null());
    json_object_set_new(o, "params_digest", json_string(s->params_digest));
    if (s->muon_owners) json_object_set(o, "muon_owners", s->muon_owners);
    if (!isnan(s->val_loss))
        json_object_set_new(o, "val", json_pack("{s:f,s:i}", "loss", s->val_loss, "step", s->val_step));
    json_t *ranks = json_array();
    for (int r = 0; r < s->world_size; r++) {
        json_t *rj = json_object(), *cats = json_object();
        json_object_set_new(rj, "rank", json_integer(r));
        json_object_set_new(rj, "host", json_string(s->rank_host + (size_t)r * ZT_HOST_NAME));
        json_object_set_new(rj, "node", json_integer(s->rank_node[r]));
        json_object_set_new(rj, "local_rank", json_integer(s->rank_local[r]));
        json_object_set_new(rj, "peak_bytes", json_integer((json_int_t)s->rank_peak[r]));
        for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++)
            json_object_set_new(cats, zt_category_name(cc),
                                json_integer((json_int_t)s->rank_cat_peak[(size_t)r * ZT_NUM_CATEGORIES + cc]));
        json_object_set_new(rj, "peak_by_category", cats);
        json_object_set_new(rj, "host_peak_bytes", json_integer((json_int_t)s->rank_host_peak[r]));
        json_t *hcats = json_object();
        for (int cc = 0; cc < ZT_NUM_CATEGORIES; cc++)
            json_object_set_new(hcats, zt_category_name(cc),
                                json_integer((json_int_t)s->rank_host_cat_peak[(size_t)r * ZT_NUM_CATEGORIES + cc]));
        json_object_set_new(rj, "host_peak_by_category", hcats);
        json_object_set_new(rj, "os_peak_bytes", json_integer((json_int_t)s->rank_os_peak[r]));
        json_t *proc = s->rank_process ? json_array_get(s->rank_process, (size_t)r) : NULL;
        if (proc && !json_is_null(proc)) json_object_set(rj, "process", proc);
        json_t *dev = s->rank_device_process ? json_array_get(s->rank_device_process, (size_t)r) : NULL;
        if (dev && !json_is_null(dev)) json_object_set(rj, "device_process", dev);
        json_array_append_new(ranks, rj);
    }
    json_object_set_new(o, "ranks", ranks);
    json_object_set_new(o, "process_sampling_overhead", json_real(s->process_sampling_overhead));
    zt_imbalance im = zt_imbalance_compute(s->rank_peak, s->rank_cat_peak, s->world_size);
    json_t *imj = json_object();
    json_object_set_new(imj, "peak_max_over_mean", json_real(im.peak_max_over_mean));
    json_object_set_new(imj, "peak_max_minus_min_bytes", json_integer((json_int_t)im.peak_max_minus_min_bytes));
    json_object_set_new(imj, "max_rank", json_integer(im.max_rank));
    json_object_set_new(imj, "top_category", json_string(zt_category_name(im.top_category)));
    char detail[160];
    const char *cause = zt_seq_split_cause(s->cfg->seq_parallel, s->cfg->seq_len, s->cfg->seq_len_jitter,
                                           im.top_category, im.peak_max_minus_min_bytes, detail, sizeof detail);
    if (cause) json_object_set_new(imj, "cause", json_pack("{s:s,s:s}", "name", cause, "detail", detail));
    json_object_set_new(o, "imbalance", imj);
    json_object_set_new(o, "nodes", json_integer(s->nnodes));
    json_object_set_new(o, "imbalance_by_node", imbalance_by_node(s));
    json_object_set_new(o, "host_memory_by_node", host_memory_by_node(s));

    ZT_TRY(zt_mkdir_p(dir, err));
    char path[1100], tmp[1110];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(o, tmp, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (rc != 0) return ZT_FAIL(err, ZT_ERR_IO, "cannot write %s", tmp);
    if (rename(tmp, path) != 0) return ZT_FAIL(err, ZT_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    return ZT_OK;
}

static json_t *labels_json(const zt_mem *m) {
    json_t *list = json_array();
    for (int i = 0; i < m->nlabels; i++) {
        const zt_label_stat *l = &m->labels[i];
        json_array_append_new(list, json_pack("{s:s,s:s,s:I}", "label", l->label, "category",
                                              zt_category_name(l->category), "peak_bytes", (json_int_t)l->bytes.peak));
    }
    return list;
}

zt_status zt_labels_write(const char *dir, int rank, const zt_mem *device, const zt_mem *host, zt_error *err) {
    json_t *o = json_pack("{s:i,s:o,s:o}", "rank", rank, "device", labels_json(device), "host", labels_json(host));
    char *text = o ? json_dumps(o, JSON_INDENT(1)) : NULL;
    json_decref(o);
    if (!text) return ZT_FAIL(err, ZT_ERR_OOM, "cannot write the label table");
    char path[1100];
    snprintf(path, sizeof path, "%s/labels_rank%d.json", dir, rank);
    zt_status st = zt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

json_t *zt_link_step_json(const zt_link_stats *now, const zt_link_stats *before) {
    static const char *const dir_name[2] = {"h2d", "d2h"};
    json_t *o = json_object();
    for (int d = 0; d < 2; d++) {
        char key[32];
        snprintf(key, sizeof key, "%s_gbs", dir_name[d]);
        json_object_set_new(o, key, json_real(now->gbs[d]));
        snprintf(key, sizeof key, "%s_bytes", dir_name[d]);
        json_object_set_new(o, key, json_real(now->bytes[d] - before->bytes[d]));
        snprintf(key, sizeof key, "%s_transfer_s", dir_name[d]);
        json_object_set_new(o, key, json_real(now->busy_s[d] - before->busy_s[d]));
        snprintf(key, sizeof key, "%s_exposed_s", dir_name[d]);
        json_object_set_new(o, key, json_real(now->exposed_s[d] - before->exposed_s[d]));
    }
    return o;
}
