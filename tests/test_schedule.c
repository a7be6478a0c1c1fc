/* The stage-3 gather schedule's decisions (shard/schedule.c) on small
 * hand-worked cases: persistence, prefetch under the live cap, the reuse
 * distance. The engine acts on these decisions and zt-plan replays them,
 * so a case here is a case of both. The last check proves the comparisons
 * can fail: a cap one parameter too small must change a decision. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "zt_schedule.h"

/* Units 0..3 of 100, 200, 300 and 10 parameters (padding none). */
static zt_model_spec *four_units(void) {
    zt_model_spec *spec = calloc(1, sizeof *spec);
    size_t sizes[4] = {100, 200, 300, 10};
    if (!spec) return NULL;
    spec->nunits = 4;
    for (int u = 0; u < 4; u++) spec->units[u].numel = spec->units[u].padded_numel = sizes[u];
    return spec;
}

static int same(const int *got, int n, const int *want, int wn) {
    if (n != wn) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void print_picks(const char *what, const int *got, int n) {
    printf("  %s: %d pick(s):", what, n);
    for (int i = 0; i < n; i++) printf(" %d", got[i]);
    printf("\n");
}

static void test_persistence(const zt_model_spec *spec) {
    zt_sched_knobs k3 = {3, 0, 50, 0, 0}, k2 = {2, 0, 50, 0, 0};
    CHECK(zt_sched_persistent(&spec->units[3], &k3) && !zt_sched_on_demand(&spec->units[3], &k3),
          "stage 3: a 10-parameter unit under a threshold of 50 persists");
    CHECK(!zt_sched_persistent(&spec->units[0], &k3) && zt_sched_on_demand(&spec->units[0], &k3),
          "stage 3: a 100-parameter unit is gathered on demand");
    CHECK(!zt_sched_persistent(&spec->units[3], &k2) && !zt_sched_on_demand(&spec->units[3], &k2),
          "stage 2: nothing persists and nothing is gathered");
}

static void test_prefetch(const zt_model_spec *spec) {
    unsigned char sharded[4] = {0, 1, 1, 1}; /* unit 0 in use */
    int got[8];
    int order[4] = {0, 1, 2, 3};
    zt_sched_ahead a = {order, 4, 1, NULL, 0};
    zt_sched_knobs k = {3, 2, 50, 0, 0};
    int n = zt_sched_prefetch(spec, &k, &a, sharded, 100, got);
    CHECK(same(got, n, (int[]){1, 2}, 2), "no cap: the next two units");
    k.max_live_params = 350; /* 100 live + 200 fits, + 300 more does not */
    n = zt_sched_prefetch(spec, &k, &a, sharded, 100, got);
    CHECK(same(got, n, (int[]){1}, 1), "cap 350: unit 1 only");
    int order2[3] = {0, 2, 1};
    zt_sched_ahead a2 = {order2, 3, 1, NULL, 0};
    n = zt_sched_prefetch(spec, &k, &a2, sharded, 100, got);
    CHECK(n == 0, "cap 350, unit 2 next: it stops the prefetch and unit 1 does not overtake it (%d picks)", n);
    int order3[5] = {0, 3, 1, 1, 2};
    zt_sched_ahead a3 = {order3, 5, 1, NULL, 0};
    k.max_live_params = 0;
    k.prefetch = 3;
    n = zt_sched_prefetch(spec, &k, &a3, sharded, 100, got);
    CHECK(same(got, n, (int[]){1}, 1), "persistent unit 3 and unit 1's second use are skipped");
    zt_sched_ahead none = zt_sched_no_ahead();
    CHECK(zt_sched_prefetch(spec, &k, &none, sharded, 100, got) == 0, "a pass off its record prefetches nothing");
    unsigned char busy[4] = {0, 0, 1, 1}; /* unit 1 on its way already */
    n = zt_sched_prefetch(spec, &k, &a, busy, 300, got);
    CHECK(same(got, n, (int[]){2}, 1), "a unit already gathering is not started again");
}

static void test_keep(const zt_model_spec *spec) {
    unsigned char seen[4];
    int fwd[3] = {0, 1, 2}, bwd[3] = {2, 1, 0};
    /* Unit 1 released after its forward use (pos 2): unit 2 (300) comes
     * before its backward use. */
    zt_sched_ahead a = {fwd, 3, 2, bwd, 3};
    zt_sched_knobs k = {3, 0, 50, 0, 300};
    CHECK(zt_sched_keep(spec, &k, &a, 1, seen), "reuse distance 300: unit 1 stays (300 in between)");
    k.max_reuse_distance = 299;
    CHECK(!zt_sched_keep(spec, &k, &a, 1, seen), "reuse distance 299: unit 1 goes");
    zt_sched_ahead last = {bwd, 3, 3, NULL, 0};
    k.max_reuse_distance = 1000;
    CHECK(!zt_sched_keep(spec, &k, &last, 0, seen), "after backward's last use the step comes: nothing is kept");
    int order[3] = {0, 3, 0};
    zt_sched_ahead p = {order, 3, 1, NULL, 0};
    k.max_reuse_distance = 5;
    CHECK(zt_sched_keep(spec, &k, &p, 0, seen), "a persistent unit in between counts nothing");
    k.max_reuse_distance = 0;
    CHECK(!zt_sched_keep(spec, &k, &p, 0, seen), "distance 0: the knob is off");
}

/* The negative twin: at a cap of exactly 300 the second unit fits (100 +
 * 200); at 299 it must not, and the comparison must tell them apart. */
static void test_can_fail(const zt_model_spec *spec) {
    unsigned char sharded[4] = {0, 1, 1, 1};
    int order[4] = {0, 1, 2, 3}, got[8];
    zt_sched_ahead a = {order, 4, 1, NULL, 0};
    zt_sched_knobs k = {3, 1, 0, 300, 0};
    int n = zt_sched_prefetch(spec, &k, &a, sharded, 100, got);
    CHECK(same(got, n, (int[]){1}, 1), "cap 300: unit 1 fits exactly");
    k.max_live_params = 299;
    int wrong = zt_sched_prefetch(spec, &k, &a, sharded, 100, got);
    CHECK(!same(got, wrong, (int[]){1}, 1), "cap 299 must change the decision, and the check must see it");
    if (g_failures) print_picks("cap 299", got, wrong);
}

int main(void) {
    zt_model_spec *spec = four_units();
    if (!spec) return 1;
    test_persistence(spec);
    test_prefetch(spec);
    test_keep(spec);
    test_can_fail(spec);
    free(spec);
    printf("test_schedule: %ld checks, %d failures\n", g_checks, g_failures);
    return g_failures != 0;
}
