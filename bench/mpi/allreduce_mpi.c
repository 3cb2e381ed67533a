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

#include "timing.h"

struct args {
    float *s, *r;
    int count;
};

static void call(void *p) {
    struct args *a = p;
    MPI_Allreduce(a->s, a->r, a->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
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
        struct args arg = {s, r, count};
        double med = median_per_call(call, &arg, target);
        if (rank == 0)
            printf("%ld %.2f %.3f\n", bytes, med * 1e6, size > 1 ? 2.0 * (size - 1) / size * bytes / med / 1e9 : 0.0);
        free(s);
        free(r);
    }
    MPI_Finalize();
    return 0;
}
