/* zt-plan --calibrate: the measured half of the step-time model. It fills a
 * zt_time_profile (plan_time.h) by timing this machine through the same
 * code a training run uses: the backend's kernels (created with zt-train's
 * thread count), the host optimizer of --offload cpu, the NVMe swap file,
 * and the communicator zt-train would create (MPI on the CPU; NCCL, or MPI
 * with host staging, on GPUs). A rate measured with every rank of the node
 * busy is the rate a rank of such a run gets, which is what the profile's
 * figures mean.
 *
 * Each timing runs one warm-up call, then rounds of at least ~budget/330
 * seconds (30 ms in the default 10 s budget), and keeps the best of three.
 * Every rank measures; rank 0's figures are broadcast, so every rank's
 * profile is the same bytes. */
#ifndef ZT_PLAN_CALIBRATE_H
#define ZT_PLAN_CALIBRATE_H

#include "plan_time.h"
#include "zt_error.h"

typedef struct {
    const char *device;    /* "cpu" or "cuda" */
    int threads;           /* cpu threads per rank (0: cores / ranks on this node, as zt-train does) */
    const char *nvme_path; /* a directory for a 64 MiB test file; NULL: NVMe rates from the built-in table */
    double budget_s;       /* rough wall-clock budget for all measurements (<= 0: 10 s) */
} zt_calibrate_setup;

/* Measures this machine into *out. Collective: every rank of
 * MPI_COMM_WORLD calls it, with MPI initialised by the caller (MPI_Init is
 * enough: no thread level is needed); it makes and destroys its own
 * communicator and runtime context. With one rank the collective rates and
 * the overlap stay the built-in table's, and `source` says so; so do the
 * NVMe rates without nvme_path. Fields not measured start from
 * zt_time_profile_builtin(device). A failure on any rank fails every rank
 * with the same error. */
zt_status zt_time_calibrate(const zt_calibrate_setup *setup, zt_time_profile *out, zt_error *err);

#endif
