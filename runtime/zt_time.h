/* Wall-clock seconds on the monotonic clock every process of a node shares,
 * so timestamps of different ranks line up on one timeline. */
#ifndef ZT_TIME_H
#define ZT_TIME_H

#include <time.h>

static inline double zt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
