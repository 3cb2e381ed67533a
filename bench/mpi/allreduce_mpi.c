/*
 * allreduce_mpi.c - MPI_Allreduce (sum) of floats timed as gorun's
 * examples/allreduce and package bench time gorun's: for each size, 3
 * warm-up calls, a probe that doubles the count until a batch takes 50 ms,
 * then batches for about TARGET seconds; the median batch's time per call,
 * the slowest rank's. The first call's result is checked exactly.
 *
 *   mpirun -np 4 ./allreduce_mpi 4KiB,1MiB,16MiB 1.0
 *
 * prints "size_bytes time_us busbw_GBps" lines from rank 0 (bus bandwidth
 * as nccl-tests defines it: 2(N-1)/N x bytes / time).
 */
#include <mpi.h>
#include <stdio.h>
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

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* batch runs n calls after a barrier; the slowest rank's time. */
static double batch(float *s, float *r, int count, int n) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < n; i++)
        MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double el = now() - t0, max;
    MPI_Allreduce(&el, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *sizes = strdup(argc > 1 ? argv[1] : "4KiB,1MiB,16MiB");
    double target = argc > 2 ? atof(argv[2]) : 1.0;
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        long bytes = parse_size(tok);
        int count = (int)(bytes / 4);
        float *s = malloc((size_t)count * 4 + 4), *r = malloc((size_t)count * 4 + 4);
        for (long i = 0; i < count; i++) s[i] = (float)((rank + 1) * (i % 101));
        MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (long i = 0; i < count; i++)
            if (r[i] != (float)((long)size * (size + 1) / 2 * (i % 101))) {
                fprintf(stderr, "rank %d: [%ld] = %g, want %g\n", rank, i, r[i], (double)((long)size * (size + 1) / 2 * (i % 101)));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        for (int i = 0; i < 2; i++) batch(s, r, count, 1);
        int n = 1;
        double d;
        while ((d = batch(s, r, count, n)) < 0.05 && n < (1 << 16)) n *= 2;
        int batches = (int)(target / (d > 0 ? d : 1e-3));
        if (batches < 3) batches = 3;
        if (batches > 200) batches = 200;
        double *t = malloc(sizeof(double) * batches);
        for (int b = 0; b < batches; b++) t[b] = batch(s, r, count, n) / n;
        qsort(t, batches, sizeof(double), cmp);
        double med = t[batches / 2];
        if (rank == 0)
            printf("%ld %.2f %.3f\n", bytes, med * 1e6, size > 1 ? 2.0 * (size - 1) / size * bytes / med / 1e9 : 0.0);
        free(t);
        free(s);
        free(r);
    }
    MPI_Finalize();
    return 0;
}
