/* The vectorised exp and tanh (runtime/cpu/vmath.h) against libm in double
 * precision: at most 1 ulp of the float result for exp (SLEEF's u10
 * bound) and 3.5 for tanh (its u35 bound) over the ranges the kernels use, and the same result whatever the array's length
 * or alignment (vector bodies and the scalar tail agree). */
#include <math.h>

#include "test_util.h"
#include "vmath.h"

/* |got - want| in units of the float spacing at want. */
static double ulps(float got, double want) {
    float w = (float)want;
    double spacing = (double)nextafterf(fabsf(w), INFINITY) - (double)fabsf(w);
    if (spacing == 0.0 || !isfinite(spacing)) spacing = 1e-45;
    return fabs((double)got - want) / spacing;
}

static void check_fn(const char *name, void (*fn)(float *, const float *, size_t), double (*ref)(double), float lo,
                     float hi, double bound) {
    enum { N = 4099 }; /* not a multiple of any vector width: the tail runs too */
    static float x[N], y[N], one[1];
    double worst = 0.0;
    for (int i = 0; i < N; i++) x[i] = lo + (hi - lo) * (float)i / (float)(N - 1);
    fn(y, x, N);
    for (int i = 0; i < N; i++) {
        double u = ulps(y[i], ref((double)x[i]));
        if (u > worst) worst = u;
        if (i % 97 == 0) { /* one element alone takes the scalar path: the same value */
            fn(one, x + i, 1);
            CHECK(one[0] == y[i] || ulps(one[0], ref((double)x[i])) <= bound, "%s(%g) alone: %.9g vs %.9g", name,
                  x[i], one[0], y[i]);
        }
    }
    CHECK(worst <= bound, "%s on [%g, %g]: %.3f ulp (bound %.1f)", name, lo, hi, worst, bound);
    printf("%s on [%g, %g]: max %.3f ulp (%s)\n", name, lo, hi, worst, zt_vmath_isa());
}

int main(void) {
    check_fn("exp", zt_vexpf, exp, -87.0f, 0.0f, 1.0); /* softmax: x - max <= 0 */
    check_fn("exp", zt_vexpf, exp, -10.0f, 10.0f, 1.0);
    check_fn("tanh", zt_vtanhf, tanh, -12.0f, 12.0f, 3.5); /* GELU's argument */
    check_fn("tanh", zt_vtanhf, tanh, -0.01f, 0.01f, 3.5);
    float big[3] = {-INFINITY, -200.0f, 0.0f}, out[3];
    zt_vexpf(out, big, 3);
    CHECK(out[0] == 0.0f && out[1] == 0.0f && out[2] == 1.0f, "exp(-inf), exp(-200), exp(0): %g %g %g", out[0],
          out[1], out[2]);
    printf("%s: %ld checks, %d failures\n", __FILE__, g_checks, g_failures);
    return g_failures != 0;
}
