// mpi_barrier_bench: MPI_Barrier timed the way ../shared/bench/mpi_coll_bench.c times
// the other collectives (which has no barrier), for benchmarks/side_by_side.sh's barrier row.
//
// build:  mpicc -O2 -o mpi_barrier_bench mpi_barrier_bench.c
// run:    mpirun -np 8 ./mpi_barrier_bench [-l sizes] [-t secs] [-m n] [-r n] [-L label] [-T sync|loop] [-K calls]
//
// Timing as mpi_coll_bench's default ("sync"): the emulated hosts share one kernel's
// CLOCK_MONOTONIC, so per repetition every rank agrees on Ts = max(now()) + 1 ms
// (MPI_Allreduce), sleeps until Ts, calls MPI_Barrier; the repetition's time is the
// latest rank's return - Ts. One warm-up call. A barrier moves no data, so the size list
// (-l, the other programs' sizes) only repeats the row, one per size, for the table.
// Checked: no rank returned before the last rank called (max of entries <= min of
// returns, on the shared clock), in every repetition. -T loop (-K calls, default 50), as
// mpi_coll_bench's: a barrier, then K barriers back to back, the repetition the slowest
// rank's time / K; checked on the first of the K.
// Output (rank 0): "label barrier bytes reps min_us med_us max_us ok"
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

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  const char *label = "mpi";
  char list[256] = "8";
  double budget = 2.0;
  int minreps = 3, maxreps = 200, c, loop = 0, kloop = 50;
  while ((c = getopt(argc, argv, "l:t:m:r:L:T:K:h")) != -1) {
    switch (c) {
    case 'l': snprintf(list, sizeof list, "%s", optarg); break;
    case 't': budget = atof(optarg); break;
    case 'm': minreps = atoi(optarg); break;
    case 'r': maxreps = atoi(optarg); break;
    case 'L': label = optarg; break;
    case 'T': loop = !strcmp(optarg, "loop"); break;
    case 'K': kloop = atoi(optarg); if (kloop < 1) kloop = 1; break;
    default:
      if (!rank) fprintf(stderr, "usage: mpi_barrier_bench [-l sizes] [-t secs] [-m minreps] [-r maxreps] [-L label] [-T sync|loop] [-K calls]\n");
      MPI_Finalize();
      return c == 'h' ? 0 : 2;
    }
  }
  if (minreps < 1 || maxreps < minreps || budget < 0) {
    if (!rank) fprintf(stderr, "mpi_barrier_bench: need 1 <= -m <= -r and -t >= 0\n");
    MPI_Finalize();
    return 2;
  }
  double *t = malloc(sizeof(double) * (size_t)maxreps);
  if (!rank) {
    printf("# %s: np=%d budget=%.1fs reps=[%d,%d] timing=%s\n", label, np, budget, minreps, maxreps,
           loop ? "loop=max(local)/K" : "sync=max(end)-Ts");
    if (loop) printf("# loop: K=%d calls per rep\n", kloop);
    printf("# label op bytes reps min_us med_us max_us ok\n");
    fflush(stdout);
  }
  for (char *s = strtok(list, ","); s; s = strtok(NULL, ",")) {
    MPI_Barrier(MPI_COMM_WORLD);  // warm-up
    int ok = 1, nrep = 0;
    double total = 0;
    while (nrep < maxreps && (nrep < minreps || total < budget)) {
      double ts = 0;
      if (loop) {
        MPI_Barrier(MPI_COMM_WORLD);
      } else {
        double t0 = now();
        MPI_Allreduce(&t0, &ts, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        ts += 1e-3;
        struct timespec w = {(time_t)ts, (long)((ts - (time_t)ts) * 1e9)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &w, NULL)) {}
      }
      const double in = now();
      MPI_Barrier(MPI_COMM_WORLD);
      const double first_out = now();
      for (int k = 1; k < (loop ? kloop : 1); k++) MPI_Barrier(MPI_COMM_WORLD);
      const double out = now();
      // {latest entry, -earliest return of the first, latest return or slowest loop}
      double mine[3] = {in, -first_out, loop ? (out - in) / kloop : out}, all[3];
      MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (all[0] > -all[1]) ok = 0;
      t[nrep] = loop ? all[2] : all[2] - ts;
      total += t[nrep++];
    }
    if (!rank) {
      qsort(t, (size_t)nrep, sizeof(double), cmpd);
      const double med = nrep % 2 ? t[nrep / 2] : 0.5 * (t[nrep / 2 - 1] + t[nrep / 2]);
      printf("%s barrier %s %d %.1f %.1f %.1f %s\n", label, s, nrep, t[0] * 1e6, med * 1e6, t[nrep - 1] * 1e6, ok ? "ok" : "FAIL");
      fflush(stdout);
    }
  }
  free(t);
  MPI_Finalize();
  return 0;
}
