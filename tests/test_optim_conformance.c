/* The same checks for every optimizer of the registry (optim/registry.c),
 * under mpirun with 2 ranks (launch/zt-run -np 2), fp32, CPU backend, on
 * tests/optim_kit.h's model (matrices split across the two slices):
 *
 *  bytes    the optimizer-category bytes each rank allocates, on the device
 *           and (offload) in the host pool, equal the planner's closed form
 *           (zt_engine_state_bytes) and the table's zt_optim_state_bytes,
 *           at stages 0 and 2. Negative twin: the closed form of another
 *           optimizer (one with other bytes) is told apart.
 *  host     3 steps at stage 2 on the device and with offload (the table's
 *           host step on offload/'s CPU kernels) give bitwise the same
 *           master values and checkpoint blocks (as they do today for all
 *           four; the CPU kernels round alike). Negative twin: a host
 *           run one step short is told apart.
 *  resume   the state saved as world slices, placed into a fresh engine of
 *           the same world, reads back bitwise; one more step on each gives
 *           bitwise the same values. Negative twin: a placed state with one
 *           element changed is told apart.
 *  reshard  the same state placed into a 1-rank engine (MPI_COMM_SELF)
 *           reads back bitwise where the table keeps the state per element
 *           or per matrix (AdamW, SGD, Adafactor) and, where it re-blocks
 *           (8-bit Adam), within 1% of each unit's largest value (half a
 *           code step of the block's scale at most).
 *
 * Multi-rank behaviour of whole trainings (stages, resume, reshard of
 * zt-train runs) stays with tests/mpi/zt_optimizer_test.py and
 * zt_optimizer_state_test.py; this test is the per-table contract. */
#include "optim_kit.h"

static zt_engine_config config_for(const zt_optim *opt, int stage, int offload) {
    zt_engine_config c = {.stage = stage, .optimizer = opt, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 0.1f, .momentum = 0.9f, .adafactor_decay = -0.8f,
                          .muon_momentum = 0.95f, .muon_nesterov = 1, .muon_ns_steps = 5,
                          .muon_ns_coef = {3.4445f, -4.775f, 2.0315f}, .muon_eps = 1e-7f, .muon_adamw_lr_scale = 1.0f,
                          .adafactor_clip = 1.0f, .adafactor_eps = 1e-30f, .adafactor_beta1 = 0.9f,
                          .dtype = ZT_FP32, .reduce_dtype = ZT_FP32, .bucket_bytes = 1 << 20,
                          .overlap_comm = 1, .offload = offload, .host_threads = 1};
    return c;
}

static void start(zt_ctx *ctx, zt_comm *comm) {
    MUST(zt_ctx_init(ctx, ZT_DEVICE_CPU, 1, 0, comm->rank, comm->world_size, 1), ctx);
}

static void check_bytes(const zt_optim *opt, zt_comm *comm, int stage, int offload) {
    zt_model_spec spec;
    kit_spec(&spec, comm->world_size);
    zt_engine_config c = config_for(opt, stage, offload);
    zt_ctx ctx;
    zt_engine e;
    start(&ctx, comm);
    MUST(zt_engine_init(&e, &ctx, comm, &spec, &c, kit_init, &spec), &ctx);
    zt_mem *mem = offload ? &ctx.host_mem : &ctx.device_mem;
    size_t got = mem->by_category[ZT_CAT_OPTIMIZER].current, table = 0;
    zt_state_bytes plan = zt_engine_state_bytes(&spec, &c, comm->rank);
    size_t want = offload ? plan.host_optimizer : plan.optimizer;
    for (int u = 0; u < spec.nunits; u++) {
        size_t lo, n;
        MUST(zt_engine_owned_range(&e, u, &lo, &n), &ctx);
        table += zt_optim_state_bytes(opt, &c, &spec.units[u], lo, lo + n);
    }
    CHECK(got == want && got == table, "%s stage %d offload %d rank %d: allocated %zu, planner %zu, table %zu",
          opt->name, stage, offload, comm->rank, got, want, table);
    for (int i = 0; i < zt_optim_count(); i++) { /* negative twin: another table's bytes are not these */
        zt_engine_config other = config_for(zt_optim_at(i), stage, offload);
        zt_state_bytes ob = zt_engine_state_bytes(&spec, &other, comm->rank);
        size_t theirs = offload ? ob.host_optimizer : ob.optimizer;
        if (zt_optim_at(i) != opt && theirs != got) {
            CHECK(theirs != want, "%s: the planner cannot tell it from %s", opt->name, zt_optim_at(i)->name);
            break;
        }
    }
    zt_engine_destroy(&e);
    zt_ctx_destroy(&ctx);
}

/* An engine of opt at stage 2 on comm after `steps` steps. */
static void trained(zt_engine *e, zt_ctx *ctx, zt_model_spec *spec, zt_comm *comm, const zt_optim *opt, int offload,
                    int steps) {
    kit_spec(spec, comm->world_size);
    zt_engine_config c = config_for(opt, 2, offload);
    start(ctx, comm);
    MUST(zt_engine_init(e, ctx, comm, spec, &c, kit_init, spec), ctx);
    for (int s = 0; s < steps; s++) MUST(kit_step(e, s, 1e-2f), ctx);
}

static size_t state_diff(const kit_state *a, const kit_state *b, const zt_model_spec *spec) {
    size_t n = 0;
    for (int k = 0; k < 3; k++)
        for (int u = 0; u < spec->nunits; u++) n += kit_diff(a->v[k][u], b->v[k][u], spec->units[u].numel);
    return n;
}

static void check_host_device(const zt_optim *opt, zt_comm *comm) {
    zt_model_spec sd, sh;
    zt_ctx cd, ch;
    zt_engine ed, eh;
    kit_state d = {0}, h = {0};
    trained(&ed, &cd, &sd, comm, opt, 0, 3);
    trained(&eh, &ch, &sh, comm, opt, 1, 3);
    MUST(kit_gather(&ed, comm, &d), &cd);
    MUST(kit_gather(&eh, comm, &h), &ch);
    size_t n = state_diff(&d, &h, &sd);
    CHECK(n == 0, "%s: host and device steps differ in %zu values", opt->name, n);
    kit_free(&h);
    zt_engine_destroy(&eh);
    zt_ctx_destroy(&ch);
    trained(&eh, &ch, &sh, comm, opt, 1, 2); /* negative twin: a host run one step short is told apart */
    MUST(kit_gather(&eh, comm, &h), &ch);
    CHECK(state_diff(&d, &h, &sd) != 0, "%s: 2 host steps read as 3 device steps", opt->name);
    kit_free(&d);
    kit_free(&h);
    zt_engine_destroy(&ed);
    zt_engine_destroy(&eh);
    zt_ctx_destroy(&cd);
    zt_ctx_destroy(&ch);
}

/* Saved, placed into a fresh engine of the same world, read back; then one
 * more step on each. */
static void check_resume(const zt_optim *opt, zt_comm *comm) {
    zt_model_spec sa, sb;
    zt_ctx ca, cb;
    zt_engine ea, eb;
    kit_state a = {0}, b = {0};
    trained(&ea, &ca, &sa, comm, opt, 0, 2);
    trained(&eb, &cb, &sb, comm, opt, 0, 0);
    MUST(kit_gather(&ea, comm, &a), &ca);
    MUST(kit_place(&eb, &a), &cb);
    zt_engine_state_counters counters = zt_engine_get_counters(&ea);
    zt_engine_set_counters(&eb, &counters);
    MUST(kit_gather(&eb, comm, &b), &cb);
    CHECK(state_diff(&a, &b, &sa) == 0, "%s: a placed state reads back otherwise", opt->name);
    kit_free(&b);
    float keep = a.v[1][0][1]; /* negative twin: a placed state with one element changed is told apart */
    a.v[1][0][1] = keep + 1.0f;
    MUST(kit_place(&eb, &a), &cb);
    MUST(kit_gather(&eb, comm, &b), &cb);
    a.v[1][0][1] = keep;
    CHECK(state_diff(&a, &b, &sa) != 0, "%s: a changed element goes unseen", opt->name);
    kit_free(&b);
    MUST(kit_place(&eb, &a), &cb);
    MUST(kit_step(&ea, 2, 1e-2f), &ca);
    MUST(kit_step(&eb, 2, 1e-2f), &cb);
    kit_free(&a);
    MUST(kit_gather(&ea, comm, &a), &ca);
    MUST(kit_gather(&eb, comm, &b), &cb);
    size_t n = state_diff(&a, &b, &sa);
    CHECK(n == 0, "%s: the step after a resume differs in %zu values", opt->name, n);
    kit_free(&a);
    kit_free(&b);
    zt_engine_destroy(&ea);
    zt_engine_destroy(&eb);
    zt_ctx_destroy(&ca);
    zt_ctx_destroy(&cb);
}

/* The largest difference of the two states over unit u's first numel
 * values of `kind`, relative to the largest value there. */
static double rel_diff(const kit_state *a, const kit_state *b, int kind, int u, size_t numel) {
    double most = 0.0, big = 0.0;
    for (size_t i = 0; i < numel; i++) {
        double d = fabs((double)a->v[kind][u][i] - (double)b->v[kind][u][i]);
        if (d > most) most = d;
        if (fabs((double)a->v[kind][u][i]) > big) big = fabs((double)a->v[kind][u][i]);
    }
    return big > 0.0 ? most / big : most;
}

static void check_reshard(const zt_optim *opt, zt_comm *comm, zt_comm *self) {
    zt_model_spec sa, s1;
    zt_ctx ca, c1;
    zt_engine ea, e1;
    kit_state a = {0}, one = {0};
    trained(&ea, &ca, &sa, comm, opt, 0, 2);
    trained(&e1, &c1, &s1, self, opt, 0, 0);
    MUST(kit_gather(&ea, comm, &a), &ca);
    MUST(kit_place(&e1, &a), &c1);
    MUST(kit_gather(&e1, self, &one), &c1);
    int exact = opt->slots[0].layout != ZT_SLOT_BLOCK_CODES;
    for (int k = 0; k < 3; k++)
        for (int u = 0; u < s1.nunits; u++) {
            size_t numel = s1.units[u].numel;
            if (exact || k == 0) {
                size_t n = kit_diff(a.v[k][u], one.v[k][u], numel);
                CHECK(n == 0, "%s: block %d of unit %d differs in %zu values after 2 -> 1 ranks", opt->name, k, u, n);
            } else {
                double r = rel_diff(&a, &one, k, u, numel);
                CHECK(r <= 1e-2, "%s: block %d of unit %d moved by %.3g of its largest value (bound 1e-2)",
                      opt->name, k, u, r);
            }
        }
    kit_free(&a);
    kit_free(&one);
    zt_engine_destroy(&ea);
    zt_engine_destroy(&e1);
    zt_ctx_destroy(&ca);
    zt_ctx_destroy(&c1);
}

int main(void) {
    zt_comm *comm = test_comm();
    zt_comm self;
    zt_error err = {0};
    if (zt_comm_split(comm, comm->rank, 0, &self, &err) != ZT_OK) {
        fprintf(stderr, "FAIL: zt_comm_split: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < zt_optim_count(); i++) {
        const zt_optim *opt = zt_optim_at(i);
        for (int stage = 0; stage <= 2; stage += 2)
            for (int offload = 0; offload <= 1; offload++) check_bytes(opt, comm, stage, offload);
        check_host_device(opt, comm);
        check_resume(opt, comm);
        check_reshard(opt, comm, &self);
        if (comm->rank == 0) printf("ok %s (%s)\n", opt->name, opt->description);
    }
    zt_comm_destroy(&self);
    printf("rank %d: %ld checks, %d failures\n", comm->rank, g_checks, g_failures);
    return g_failures ? 1 : 0;
}
