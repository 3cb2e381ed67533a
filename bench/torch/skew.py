"""How the barrier's skew shapes the time of a call after it.

    python3 bench/torch/skew.py PREFIX [PREFIX...]

Reads the files `bench/torch/allreduce.py --dump PREFIX` wrote (one per
rank: size,barrier_exit_s,end_s for each timed call, on the host's
monotonic clock, so the ranks must share one host) and prints, for each prefix and size, rank 0's median
call time split by whether rank 0 left the barrier first or not, the
median skew (last rank's barrier exit minus the first's), and the median
time from the last rank's barrier exit to rank 0's end (the call as the
last rank to arrive sees it).
"""

import glob
import statistics
import sys


def load(prefix):
    ranks = {}
    for path in sorted(glob.glob(glob.escape(prefix) + ".*.csv")):
        r = path[len(prefix) + 1:-4]
        if r.isdigit():
            ranks[int(r)] = [tuple(float(x) for x in line.split(",")) for line in open(path) if line.strip()]
    return ranks


def med_us(xs):
    return f"{statistics.median(xs) * 1e6:.1f}" if xs else "-"


def main():
    for prefix in sys.argv[1:]:
        ranks = load(prefix)
        if 0 not in ranks or len({len(v) for v in ranks.values()}) != 1:
            sys.exit(f"{prefix}: every rank's file, with as many calls, is needed")
        for size in sorted({int(row[0]) for row in ranks[0]}):
            first, later, skews, from_last = [], [], [], []
            for i, (sz, exit0, end0) in enumerate(ranks[0]):
                if int(sz) != size:
                    continue
                exits = [ranks[r][i][1] for r in ranks]
                (first if exit0 == min(exits) else later).append(end0 - exit0)
                skews.append(max(exits) - min(exits))
                from_last.append(end0 - max(exits))
            print(f"{prefix} size={size} np={len(ranks)} calls={len(skews)} rank0_first={len(first)} "
                  f"median_us first={med_us(first)} later={med_us(later)} all={med_us(first + later)} "
                  f"skew={med_us(skews)} from_last_exit={med_us(from_last)}")


main()
