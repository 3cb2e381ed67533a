/*
 * alltoall_mpi.c - MPI_Alltoall of floats timed as examples/allreduce
 * -coll alltoall times gorun's: SIZE is one rank's whole send buffer
 * (SIZE/N bytes to each rank). For each size: 3 warm-up calls, a probe
 * that doubles the count until a batch takes 50 ms, then batches for
 * about TARGET seconds; the median batch's time per call, the slowest
 * rank's. The first call's result is checked exactly.
 *
 *   mpirun -np 4 ./alltoall_mpi 1KiB,64KiB,4MiB 1.0
 *
 * prints "size_bytes time_us" lines from rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "timing.h"

struct args {
    float *s, *r;
    int per;
};

static void call(void *p) {
    struct args *a = p;
    MPI_Alltoall(a->s, a->per, MPI_FLOAT, a->r, a->per, MPI_FLOAT, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *sizes = strdup(argc > 1 ? argv[1] : "1KiB,64KiB,4MiB");
    double target = argc > 2 ? atof(argv[2]) : 1.0;
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        long bytes = parse_size(tok);
        int per = (int)(bytes / 4 / size);
        float *s = malloc((size_t)per * size * 4 + 4), *r = malloc((size_t)per * size * 4 + 4);
        for (long i = 0; i < (long)per * size; i++) s[i] = (float)(rank * 1000 + i % 997);
        MPI_Alltoall(s, per, MPI_FLOAT, r, per, MPI_FLOAT, MPI_COMM_WORLD);
        for (int q = 0; q < size; q++)
            for (int i = 0; i < per; i++)
                if (r[q * per + i] != (float)(q * 1000 + ((long)rank * per + i) % 997)) {
                    fprintf(stderr, "rank %d: block %d [%d] wrong\n", rank, q, i);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
        struct args arg = {s, r, per};
        double med = median_per_call(call, &arg, target);
        if (rank == 0) printf("%ld %.2f\n", bytes, med * 1e6);
        free(s);
        free(r);
    }
    MPI_Finalize();
    return 0;
}
