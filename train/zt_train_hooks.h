/* Fault injection for tests, kept apart from the user's options: zt-train
 * reads these from ZT_TEST_* environment variables (never from flags or
 * config files) and hands them to zt_train_run. A run without them passes
 * zt_train_hooks_none(). */
#ifndef ZT_TRAIN_HOOKS_H
#define ZT_TRAIN_HOOKS_H

typedef struct {
    /* ZT_TEST_EXIT_RANK / ZT_TEST_EXIT_STEP: that rank exits abruptly
     * between backward and the optimizer of that step (1-based). */
    int exit_rank, exit_step;
    /* ZT_TEST_STALL=RANK:STEP[:forward]: that rank stops answering (sleeps)
     * before the step's optimizer, or before its forward. */
    int stall_rank, stall_step, stall_forward;
    /* ZT_TEST_KILL_SAVE=STEP:RANK:POINT: that rank dies (SIGKILL) at the
     * POINT-th crash point of that save (zt_ckpt_hooks);
     * ZT_TEST_SAVE_POINTS=1 prints every point a save passes. */
    int kill_step, kill_rank, kill_point, list_points;
    /* ZT_TEST_OVERFLOW=STEP:RANK: that rank's loss gradient is inf at that
     * step, as an fp16 overflow on one rank. */
    int overflow_step, overflow_rank;
    /* ZT_TEST_NVME_FAIL=read|write:N[:RANK]: that rank's (every rank's
     * when -1) N-th request of that kind fails (zt_nvme.h). */
    long nvme_fail_read, nvme_fail_write;
    int nvme_fail_rank;
    /* ZT_TEST_LEAK=RANK:BYTES: that rank mallocs and touches BYTES more
     * heap at every step and keeps it to the end (the leak watch's test). */
    int leak_rank;
    long long leak_bytes;
    /* ZT_TEST_RAISE=RANK:STEP:SIGNAL: that rank sends itself SIGNAL (TERM,
     * INT, USR1, USR2) at the end of that step, before it votes. */
    int raise_rank, raise_step, raise_signal;
    /* ZT_TEST_KILL_SAVE=...:SIGNAL: the save point sends that signal to the
     * rank instead of SIGKILL (a second signal during a save). */
    int kill_signal;
    /* ZT_TEST_FS_FAIL=RANK:N[+|-M]:ERRNO: that rank's (every rank's when
     * -1) N-th write through zt_fs fails with ERRNO (ENOSPC, EIO, EROFS,
     * EDQUOT): N+ every write from the N-th on, N-M writes N to M. */
    int fs_fail_rank, fs_fail_errno;
    long fs_fail_from, fs_fail_to;
} zt_train_hooks;

/* No hook armed. */
static inline zt_train_hooks zt_train_hooks_none(void) {
    return (zt_train_hooks){.exit_rank = -1, .exit_step = -1, .stall_rank = -1, .stall_step = -1,
                            .kill_step = -1, .overflow_step = -1, .nvme_fail_rank = -1,
                            .leak_rank = -1, .raise_rank = -1, .raise_step = -1, .fs_fail_rank = -2};
}

/* The hooks the ZT_TEST_* variables of this process arm. */
zt_train_hooks zt_train_hooks_from_env(void);

#endif
