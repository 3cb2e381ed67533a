/*
 * scale_mpi.c - the job bench/scale.sh times, as an MPI program: the same
 * shape as examples/scale. MPI_Init (its duration is the join time),
 * MPI_Allreduce of long long with MPI_SUM over 1, 4096 and 262144 elements
 * (8 B, 32 KiB, 2 MiB), each checked exactly; MPI_Bcast of 4096 elements
 * from rank 0, checked; MPI_Barrier; then every rank's join time, peak RSS
 * (VmHWM) and open sockets, gathered to all, and rank 0 prints
 *   scale n=<N> join_ms_max=<..> rss_kib_max=<..> sockets_max=<..> sockets_mean=<..>
 *   scale started_unix_ms=<..> joined_unix_ms=<..> worked_unix_ms=<..>
 * (the last rank's start, MPI_Init done and collectives done, unix ms)
 * and after MPI_Finalize "scale exit_ms=<..>" (how long rank 0's took).
 * A mismatch prints the rank and index and exits 1.
 */
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* rank r's element i, and the sum over n ranks (as in examples/scale) */
static long long val(int r, long long i) { return (long long)(r + 1) * (i + 1) + i % 13; }
static long long want(int n, long long i) { return (long long)n * (n + 1) / 2 * (i + 1) + (long long)n * (i % 13); }
static long long bval(long long i) { return i * 7 + 3; }

static long long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            v = atoll(line + 6);
            break;
        }
    fclose(f);
    return v;
}

static long long sockets(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long long k = 0;
    struct dirent *e;
    char p[300], l[300];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t m = readlink(p, l, sizeof l - 1);
        if (m > 0) {
            l[m] = 0;
            if (strncmp(l, "socket:", 7) == 0) k++;
        }
    }
    closedir(d);
    return k;
}

/* the wall clock, in unix microseconds: the test hosts share one */
static long long unix_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int main(int argc, char **argv) {
    double t0 = now();
    long long start_us = unix_us();
    MPI_Init(&argc, &argv);
    long long join_us = (long long)((now() - t0) * 1e6);
    long long joined_us = unix_us();
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    const long long counts[] = {1, 4096, 262144};
    for (int s = 0; s < 3; s++) {
        long long cnt = counts[s];
        long long *buf = malloc(sizeof(long long) * cnt);
        for (long long i = 0; i < cnt; i++) buf[i] = val(rank, i);
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        for (long long i = 0; i < cnt; i++)
            if (buf[i] != want(n, i)) {
                fprintf(stderr, "scale_mpi: rank %d: all-reduce of %lld B: index %lld is %lld, want %lld\n",
                        rank, 8 * cnt, i, buf[i], want(n, i));
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        free(buf);
    }

    long long b[4096];
    for (int i = 0; i < 4096; i++) b[i] = rank == 0 ? bval(i) : -1;
    MPI_Bcast(b, 4096, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 4096; i++)
        if (b[i] != bval(i)) {
            fprintf(stderr, "scale_mpi: rank %d: broadcast: index %d is %lld, want %lld\n", rank, i, b[i], bval(i));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    MPI_Barrier(MPI_COMM_WORLD);

    long long worked = unix_us();
    enum { K = 6 };
    long long mine[K] = {join_us, rss_kib(), sockets(), start_us, joined_us, worked};
    long long *all = malloc(sizeof(long long) * K * n);
    MPI_Allgather(mine, K, MPI_LONG_LONG, all, K, MPI_LONG_LONG, MPI_COMM_WORLD);
    if (rank == 0) {
        long long jm = 0, rm = 0, sm = 0, ss = 0, st = 0, jd = 0, wk = 0;
        for (int r = 0; r < n; r++) {
            long long *v = all + K * r;
            if (v[0] > jm) jm = v[0];
            if (v[1] > rm) rm = v[1];
            if (v[2] > sm) sm = v[2];
            ss += v[2];
            if (v[3] > st) st = v[3];
            if (v[4] > jd) jd = v[4];
            if (v[5] > wk) wk = v[5];
        }
        printf("scale n=%d join_ms_max=%.1f rss_kib_max=%lld sockets_max=%lld sockets_mean=%.1f\n", n, jm / 1000.0,
               rm, sm, (double)ss / n);
        printf("scale started_unix_ms=%.1f joined_unix_ms=%.1f worked_unix_ms=%.1f\n", st / 1000.0, jd / 1000.0,
               wk / 1000.0);
        fflush(stdout);
    }
    free(all);
    double t1 = now();
    MPI_Finalize();
    if (rank == 0) printf("scale exit_ms=%.1f\n", (now() - t1) * 1e3);
    return 0;
}
