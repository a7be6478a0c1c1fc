/* A world-size-1 communicator for single-process tests of the engine: MPI is
 * initialised on first use and finalised at exit (test code, so a static is
 * fine here; the library itself keeps no globals). */
#ifndef ZT_TEST_COMM_H
#define ZT_TEST_COMM_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "zt_comm.h"

static void test_comm_finalize(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static zt_comm *test_comm(void) {
    static zt_comm comm;
    static int ready = 0;
    if (!ready) {
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited) MPI_Init(NULL, NULL);
        zt_error err = {0};
        if (zt_comm_create_mpi(&comm, &err) != ZT_OK) {
            fprintf(stderr, "test_comm: %s\n", err.msg);
            abort();
        }
        atexit(test_comm_finalize);
        ready = 1;
    }
    return &comm;
}

#endif
