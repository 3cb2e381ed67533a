/*
 * timing.h - what the MPI harnesses share: sizes like "4KiB" and "16MiB",
 * and the timing gorun's package bench does for its own collectives
 * (2 warm-up batches, a probe that doubles the calls until a batch takes
 * 50 ms, batches for about TARGET seconds, the median batch's time per
 * call, each batch timed on the slowest rank).
 */
#ifndef GORUN_BENCH_TIMING_H
#define GORUN_BENCH_TIMING_H

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long parse_size(const char *s) {
    char *end;
    long n = strtol(s, &end, 10);
    if (!strncmp(end, "KiB", 3)) n <<= 10;
    else if (!strncmp(end, "MiB", 3)) n <<= 20;
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One collective call of the harness, on its buffers. */
typedef void (*collective_fn)(void *arg);

/* batch runs n calls after a barrier; the slowest rank's time. */
static double batch(collective_fn call, void *arg, int n) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < n; i++) call(arg);
    double el = now() - t0, max;
    MPI_Allreduce(&el, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

/* median_per_call is the median batch's time per call, in seconds. */
static double median_per_call(collective_fn call, void *arg, double target) {
    for (int i = 0; i < 2; i++) batch(call, arg, 1);
    int n = 1;
    double d;
    while ((d = batch(call, arg, n)) < 0.05 && n < (1 << 16)) n *= 2;
    int batches = (int)(target / (d > 0 ? d : 1e-3));
    if (batches < 3) batches = 3;
    if (batches > 200) batches = 200;
    double *t = malloc(sizeof(double) * batches);
    for (int b = 0; b < batches; b++) t[b] = batch(call, arg, n) / n;
    qsort(t, batches, sizeof(double), cmp_double);
    double med = t[batches / 2];
    free(t);
    return med;
}

#endif
