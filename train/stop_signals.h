/* Preemption signals (--on-signal): SIGTERM, SIGINT, SIGUSR1 and SIGUSR2.
 *
 * zt_stop_signals_block, first thing in main (before MPI_Init starts any
 * thread), blocks the four in the process: every thread made afterwards
 * inherits the mask, so none of them can be killed by one. Once the
 * options are known, zt_stop_signals_start either ignores them (`ignore`)
 * or reads them from a signalfd on a watcher thread, which only records
 * the first one; the trainer reads it when it votes at the end of a step
 * (zt_step.h), so every rank learns of a signal that reached any of them at
 * the same step boundary. A second signal exits the process at once with
 * 128 + its number: a save in progress is abandoned, which the save's
 * commit protocol makes safe (docs/failure.md). No handler and no global:
 * the state lives in this struct. */
#ifndef ZT_STOP_SIGNALS_H
#define ZT_STOP_SIGNALS_H

#include <pthread.h>
#include <stdatomic.h>

#include "zt_error.h"

#define ZT_STOP_SIGNALS 4 /* SIGTERM, SIGINT, SIGUSR1, SIGUSR2, in that order */

typedef struct {
    int fd;       /* the signalfd; -1 when not watching */
    int wake[2];  /* a pipe that ends the watcher */
    pthread_t watcher;
    int watching;
    int rank;
    atomic_int first; /* the first signal's number; 0 none */
} zt_stop_signals;

/* Blocks the four signals in the calling thread (the process's only one). */
void zt_stop_signals_block(void);
/* mode "save-exit" or "exit": watch; "ignore": ignore them. */
zt_status zt_stop_signals_start(zt_stop_signals *s, const char *mode, int rank, zt_error *err);
/* The first signal received (its number), or 0. */
int zt_stop_signals_first(const zt_stop_signals *s);
/* The ranks agreed to stop on signo (received here or elsewhere): from now
 * on any signal on this rank is a second one and exits at once. */
void zt_stop_signals_stopping(zt_stop_signals *s, int signo);
/* Index of signo among the four (0..3), or -1; and back. */
int zt_stop_signal_index(int signo);
int zt_stop_signal_number(int index);
/* "SIGTERM" and so on ("signal N" for others). */
const char *zt_signal_name(int signo);
/* Ends the watcher; a later signal stays blocked (pending) until exit. */
void zt_stop_signals_end(zt_stop_signals *s);

#endif
