/* Preemption signals on a watcher thread (stop_signals.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "stop_signals.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

static const int watched[ZT_STOP_SIGNALS] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

static void watched_set(sigset_t *set) {
    sigemptyset(set);
    for (int i = 0; i < ZT_STOP_SIGNALS; i++) sigaddset(set, watched[i]);
}

void zt_stop_signals_block(void) {
    sigset_t set;
    watched_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int zt_stop_signal_index(int signo) {
    for (int i = 0; i < ZT_STOP_SIGNALS; i++)
        if (watched[i] == signo) return i;
    return -1;
}

int zt_stop_signal_number(int index) { return index >= 0 && index < ZT_STOP_SIGNALS ? watched[index] : 0; }

const char *zt_signal_name(int signo) {
    switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
    }
}

/* The first signal is recorded for the step's vote; a second one ends the
 * process now (write(2) and _exit: nothing here waits on the main thread). */
static void received(zt_stop_signals *s, int signo) {
    char line[200];
    int expected = 0;
    if (atomic_compare_exchange_strong(&s->first, &expected, signo)) {
        int n = snprintf(line, sizeof line, "zt-train [rank %d]: %s received; the ranks stop at the next step "
                         "boundary they all reach (a second signal exits at once)\n", s->rank, zt_signal_name(signo));
        if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing to do about it */ }
        return;
    }
    int n = snprintf(line, sizeof line, "zt-train [rank %d]: a second signal (%s) during the stop; exiting at once "
                     "with %d (the newest complete checkpoint is untouched)\n", s->rank, zt_signal_name(signo),
                     128 + signo);
    if (write(STDERR_FILENO, line, (size_t)n) < 0) { /* nothing to do about it */ }
    _exit(128 + signo);
}

static void *watch(void *arg) {
    zt_stop_signals *s = arg;
    struct pollfd fds[2] = {{s->fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        if (fds[1].revents) return NULL;
        struct signalfd_siginfo info;
        ssize_t got = read(s->fd, &info, sizeof info);
        if (got == (ssize_t)sizeof info) received(s, (int)info.ssi_signo);
    }
}

zt_status zt_stop_signals_start(zt_stop_signals *s, const char *mode, int rank, zt_error *err) {
    memset(s, 0, sizeof *s);
    s->fd = s->wake[0] = s->wake[1] = -1;
    s->rank = rank;
    atomic_init(&s->first, 0);
    sigset_t set;
    watched_set(&set);
    if (strcmp(mode, "ignore") == 0) {
        for (int i = 0; i < ZT_STOP_SIGNALS; i++) signal(watched[i], SIG_IGN);
        return ZT_OK;
    }
    s->fd = signalfd(-1, &set, SFD_CLOEXEC);
    if (s->fd < 0) return ZT_FAIL(err, ZT_ERR_IO, "--on-signal %s: signalfd failed: %s", mode, strerror(errno));
    if (pipe(s->wake) != 0) {
        close(s->fd);
        s->fd = -1;
        return ZT_FAIL(err, ZT_ERR_IO, "--on-signal %s: pipe failed: %s", mode, strerror(errno));
    }
    int rc = pthread_create(&s->watcher, NULL, watch, s);
    if (rc != 0) {
        zt_stop_signals_end(s);
        return ZT_FAIL(err, ZT_ERR_IO, "--on-signal %s: cannot start the watcher thread: %s", mode, strerror(rc));
    }
    s->watching = 1;
    return ZT_OK;
}

void zt_stop_signals_stopping(zt_stop_signals *s, int signo) {
    int expected = 0;
    atomic_compare_exchange_strong(&s->first, &expected, signo);
}

int zt_stop_signals_first(const zt_stop_signals *s) { return atomic_load(&((zt_stop_signals *)s)->first); }

void zt_stop_signals_end(zt_stop_signals *s) {
    if (s->watching) {
        char b = 0;
        if (write(s->wake[1], &b, 1) == 1) pthread_join(s->watcher, NULL);
        s->watching = 0;
    }
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0) close(s->wake[i]);
    if (s->fd >= 0) close(s->fd);
    s->fd = s->wake[0] = s->wake[1] = -1;
}
