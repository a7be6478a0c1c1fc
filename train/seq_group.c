/* Sequence-parallel groups for the trainer (seq_group.h). */
#include "seq_group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zt_status zt_seq_group_open(zt_seq_group *g, int P, zt_comm *world, const zt_train_model *family, void *model,
                            int B, int seq_len, zt_error *err) {
    memset(g, 0, sizeof *g);
    g->sp.P = 1;
    g->dp_world = world->world_size;
    g->dp_rank = world->rank;
    if (P <= 1) return ZT_OK;
    if (world->world_size % P != 0)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d must divide the world size %d (groups of P "
                       "consecutive ranks)", P, world->world_size);
    if (!family->set_seq_parallel)
        return ZT_FAIL(err, ZT_ERR_INVALID, "--seq-parallel %d: the %s family does not split its sequences", P,
                       family->family);
    ZT_TRY(zt_comm_split(world, world->rank / P, world->rank, &g->group, err));
    g->group.count_into = world; /* the exchanges appear in the step's comm stats as the world's all_to_all */
    g->sp = (zt_seq_parallel){&g->group, P, world->rank % P, seq_len};
    g->dp_world = world->world_size / P;
    g->dp_rank = world->rank / P;
    size_t n = (size_t)B * seq_len;
    g->tokens_full = malloc(n * sizeof *g->tokens_full);
    g->targets_full = malloc(n * sizeof *g->targets_full);
    if (!g->tokens_full || !g->targets_full) return ZT_FAIL(err, ZT_ERR_OOM, "--seq-parallel: cannot allocate rows");
    return family->set_seq_parallel(model, &g->sp, err);
}

void zt_seq_group_close(zt_seq_group *g) {
    if (g->group.ops) zt_comm_destroy(&g->group);
    free(g->tokens_full);
    free(g->targets_full);
    memset(g, 0, sizeof *g);
}

int32_t *zt_seq_group_rows(zt_seq_group *g, int32_t *own) { return g->sp.P > 1 ? g->tokens_full : own; }
int32_t *zt_seq_group_targets(zt_seq_group *g, int32_t *own) { return g->sp.P > 1 ? g->targets_full : own; }

int zt_seq_group_split(zt_seq_group *g, int B, int T_full, int32_t *tokens, int32_t *targets) {
    if (g->sp.P <= 1) return T_full;
    int t0, len;
    zt_seq_span(T_full, g->sp.P, g->sp.index, &t0, &len);
    for (int b = 0; b < B; b++) {
        memcpy(tokens + (size_t)b * len, g->tokens_full + (size_t)b * T_full + t0, (size_t)len * sizeof *tokens);
        memcpy(targets + (size_t)b * len, g->targets_full + (size_t)b * T_full + t0, (size_t)len * sizeof *targets);
    }
    g->sp.T = T_full;
    return len;
}

const char *zt_seq_split_cause(int P, int seq_len, double jitter, zt_category top, size_t max_minus_min,
                               char *detail, size_t cap) {
    if (cap) detail[0] = '\0';
    int per_position = top == ZT_CAT_ACTIVATIONS || top == ZT_CAT_WORKSPACE || top == ZT_CAT_COMM_BUFFERS;
    if (P <= 1 || max_minus_min == 0 || (seq_len % P == 0 && jitter <= 0) || !per_position) return NULL;
    int t0, longest, shortest;
    zt_seq_span(seq_len, P, 0, &t0, &longest);
    zt_seq_span(seq_len, P, P - 1, &t0, &shortest);
    if (seq_len % P != 0)
        snprintf(detail, cap, "%d positions over %d ranks: %d on the first %d, %d on the rest", seq_len, P, longest,
                 seq_len % P, shortest);
    else
        snprintf(detail, cap, "jittered lengths split over %d ranks: one position more on the first ranks when a "
                 "length is not a multiple of %d", P, P);
    return "seq_split";
}

double zt_seq_group_loss_weight(const zt_seq_group *g, int T_full) {
    if (g->sp.P <= 1) return 1.0;
    int t0, len;
    zt_seq_span(T_full, g->sp.P, g->sp.index, &t0, &len);
    return (double)len * g->sp.P / T_full;
}
