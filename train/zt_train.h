/* libzt_train's programs: zt-train and zt-plan as functions of the model
 * families they are built with. A program's main is one line: it passes
 * its families (examples/CMakeLists.txt writes it for every folder of
 * examples/; a test can pass a family of its own). */
#ifndef ZT_TRAIN_H
#define ZT_TRAIN_H

#include <stdio.h>

#include "zt_train_model.h"

/* zt-train: parses argv, agrees with the other ranks, trains the family
 * --model names. Returns the process's exit code (0 success, 1 runtime
 * failure, 2 bad input, 3 out of memory). Calls MPI_Init and MPI_Finalize. */
int zt_train_main(int argc, char **argv, const zt_train_model *const *models, int nmodels);

/* --help's list of the families, with their one-line descriptions. */
void zt_train_print_families(FILE *f, const zt_train_model *const *models, int nmodels);

/* zt-plan: the memory planner over the family --model names. */
int zt_plan_main(int argc, char **argv, const zt_train_model *const *models, int nmodels);

#endif
