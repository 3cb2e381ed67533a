#!/usr/bin/env bash
# Open MPI 5 programs under gorun (each host's agent is their PMIx server)
# against Open MPI's own mpirun, on this one host, inside the Debian 13 root
# that scripts/rootfs.sh keeps (Open MPI 5.0.7, mpi4py 4.0.3):
#
#   sudo bash bench/openmpi5.sh [PART...]          (default: launch osu)
#
#   launch  launch to MPI_Init done in every rank (a C program that writes
#           the time MPI_Init returned, as bench/launch.sh does), and the
#           whole job's wall time, 2 and 4 ranks, RUNS pairs (20); also
#           where it goes: launch to the last rank's main(), and the
#           longest MPI_Init; with TOPO_XML (a file of `lstopo --of xml`,
#           from Debian's hwloc), a third launcher in every run: gorun
#           with its ranks reading the topology from that file; with
#           GORUN_BASE (a gorun binary, as the root sees it, e.g. one
#           built from the commit before a change), another launcher in
#           every run, after mpirun
#   osu     OSU's osu_latency and osu_allreduce at 8 B, 4 KiB and 1 MiB,
#           2 ranks, RUNS_OSU pairs (10); needs OSU_DIR (below)
#   mpi4py  mpi4py's own test suite (test/main.py with --xml, so every
#           rank's result of every test is kept) at 2 and 3 ranks: the
#           whole suite once under each launcher (killed after
#           MPI4PY_TIMEOUT, 420 s), then ROUNDS timed pairs (3) without
#           test_dynproc and test_spawn; needs MPI4PY_DIR (below) and
#           python3-xmlrunner
#   mpich   MPICH's tests (test/mpi) of coll, pt2pt, comm, init, group,
#           attr and topo for up to 4 ranks, as their testlists give them
#           (lines with env= left out), built with Open MPI's mpicc and
#           util/mtest*.c (no configure), each once under each launcher
#           with a timeout (its testlist's timeLimit, else TIMEOUT, 60 s);
#           needs MPICH_DIR (below)
#
# gorun and mpirun alternate run by run, gorun first, after one run of each
# that is not counted (launch, osu); every figure is reported per run as
# gorun/mpirun with its min, median and max. gorun gets no flags. mpirun
# gets --allow-run-as-root when run as root and --oversubscribe beyond
# `nproc` ranks (this machine has 2 cores), nothing else. Before each
# series the script waits while the 1-minute load average is above
# LOAD_MAX (1.5), checking every 60 s for at most LOAD_WAIT (600) s, and
# prints `uptime` before and after it: the machine is shared.
#
# From the host, the script builds bin/gorun (static) and runs itself in
# the root (`scripts/rootfs.sh run`), passing on RUNS, RUNS_OSU, ROUNDS,
# TIMEOUT, MPI4PY_TIMEOUT, TOPO_XML, GORUN_BASE, OSU_DIR, MPI4PY_DIR,
# MPICH_DIR, OUT, LOAD_MAX and LOAD_WAIT;
# paths are the root's (the repository is /gorun there). Raw output goes to
# OUT (/tmp/gorun-openmpi5 in the root). The sources are public and are
# neither in this repository nor fetched by the script; put them in the
# root (/srv/gorun-rootfs/trixie/srv/... on the host) and build them there:
#
#   OSU micro-benchmarks 5.3 (not packaged in Debian; e.g. the copy of the
#   5.3 release at github.com/forresti/osu-micro-benchmarks), built against
#   Open MPI 5 (its configure is committed: no autotools needed):
#     sudo bash scripts/rootfs.sh run -- /bin/bash -c 'cd /srv/osu/osu-micro-benchmarks-5.3 &&
#         ./configure CC=mpicc CXX=mpicxx && make -j2'
#     OSU_DIR=/srv/osu/osu-micro-benchmarks-5.3 sudo -E bash bench/openmpi5.sh osu
#   mpi4py 4.0.3's tests (git clone https://github.com/mpi4py/mpi4py;
#   git checkout 4.0.3; copy test/ into the root), run by Debian's
#   python3-mpi4py 4.0.3 at /usr/bin/python3:
#     sudo bash scripts/rootfs.sh run -- apt-get install -y python3-xmlrunner
#     MPI4PY_DIR=/srv/mpi4py/mpi4py-4.0.3/test sudo -E bash bench/openmpi5.sh mpi4py
#   MPICH v4.2.1's test/mpi (git clone https://github.com/pmodels/mpich;
#   git archive v4.2.1 test/mpi):
#     MPICH_DIR=/srv/mpich/mpich-4.2.1-test/test/mpi sudo -E bash bench/openmpi5.sh mpich
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
vars=(RUNS RUNS_OSU ROUNDS TIMEOUT MPI4PY_TIMEOUT TOPO_XML GORUN_BASE OSU_DIR MPI4PY_DIR MPICH_DIR OUT LOAD_MAX LOAD_WAIT)
if [ ! -f /.gorun-rootfs ]; then # on the host: build gorun, then go into the root
    make -C "$repo" build >/dev/null
    pass=()
    for v in "${vars[@]}"; do
        [ -n "${!v:-}" ] && pass+=("$v=${!v}")
    done
    exec bash "$repo/scripts/rootfs.sh" run -- /usr/bin/env "${pass[@]}" /bin/bash /gorun/bench/openmpi5.sh "$@"
fi

gorun=$repo/bin/gorun
runs=${RUNS:-20}
runs_osu=${RUNS_OSU:-10}
rounds=${ROUNDS:-3}
timeout_s=${TIMEOUT:-60}
out=${OUT:-/tmp/gorun-openmpi5}
load_max=${LOAD_MAX:-1.5}
load_wait=${LOAD_WAIT:-600}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(launch osu)
mkdir -p "$out"
[ -x "$gorun" ] || { echo "openmpi5: no $gorun (make build)" >&2; exit 1; }

# mpirun_cmd N: Open MPI's own launcher for N ranks, with only the flags
# this machine needs.
mpirun_cmd() {
    local a=(mpirun)
    [ "$(id -u)" = 0 ] && a+=(--allow-run-as-root)
    [ "$1" -gt "$(nproc)" ] && a+=(--oversubscribe)
    echo "${a[@]} -np $1"
}
gorun_cmd() { echo "$gorun -np $1"; }

# settle NAME: wait while the 1-minute load is above load_max (the
# machine is shared), then print the load at the start of series NAME.
settle() {
    local waited=0 l
    while l=$(cut -d' ' -f1 /proc/loadavg) && awk -v l="$l" -v m="$load_max" 'BEGIN {exit !(l > m)}'; do
        if [ "$waited" -ge "$load_wait" ]; then
            echo "# load $l still above $load_max after ${waited} s: measuring anyway"
            break
        fi
        sleep 60
        waited=$((waited + 60))
    done
    echo "# $1: start $(date -u +%FT%TZ), waited ${waited} s for the load; uptime:$(uptime)"
}
done_series() { echo "# $1: end $(date -u +%FT%TZ); uptime:$(uptime)"; }

# stats: min, median and max of the numbers on stdin.
stats() {
    sort -g | awk '{a[NR] = $1} END {
        if (NR == 0) { print "-"; exit }
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "min %.3g median %.3g max %.3g (n=%d)\n", a[1], m, a[NR], NR }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
now_us() { echo $(($(date +%s%N) / 1000)); }

echo "# gorun $("$gorun" --version 2>&1 | head -1); $(mpirun --version 2>&1 | head -1); $(nproc) cores; host $(uname -n)"
echo "# mpirun as run here: $(mpirun_cmd 2) (2 ranks), $(mpirun_cmd 4) (4 ranks)"

# ---- launch: launch to MPI_Init done in every rank ----
part_launch() {
    local stamp=$out/launch
    mkdir -p "$stamp"
    cat >"$stamp/init.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
/* Writes the times main began and MPI_Init returned to DIR/start.PID. */
int main(int argc, char **argv) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_REALTIME, &t1);
    char p[4096];
    snprintf(p, sizeof p, "%s/start.%d", argc > 1 ? argv[1] : ".", (int)getpid());
    FILE *f = fopen(p, "w");
    if (f == NULL) return 2;
    fprintf(f, "%lld %lld\n", (long long)t0.tv_sec * 1000000000LL + t0.tv_nsec,
            (long long)t1.tv_sec * 1000000000LL + t1.tv_nsec);
    fclose(f);
    MPI_Finalize();
    return 0;
}
EOF
    mpicc -O1 -o "$stamp/init" "$stamp/init.c"
    # one N command...: prints "init_ms wall_ms main_ms mpiinit_ms" for one
    # job of N ranks: from the launcher's start to the last rank's MPI_Init
    # done, to the launcher's exit, and to the last rank's main(); and the
    # longest MPI_Init of a rank
    one() {
        local n=$1
        shift
        rm -f "$stamp"/start.*
        local t0 t1 k
        t0=$(date +%s%N)
        if ! "$@" "$stamp/init" "$stamp" >"$stamp/log" 2>&1; then
            echo "openmpi5: failed: $* (log: $stamp/log)" >&2
            tail -5 "$stamp/log" >&2
            return 1
        fi
        t1=$(date +%s%N)
        k=$(find "$stamp" -name 'start.*' | wc -l)
        [ "$k" = "$n" ] || { echo "openmpi5: $k of $n ranks finished MPI_Init: $*" >&2; return 1; }
        cat "$stamp"/start.* | awk -v t0="$t0" -v t1="$t1" '
            $1 > m {m = $1} $2 > i {i = $2} $2 - $1 > d {d = $2 - $1}
            END {printf "%.1f %.1f %.1f %.1f\n", (i - t0) / 1e6, (t1 - t0) / 1e6, (m - t0) / 1e6, d / 1e6}'
    }
    local n i g m gr mr t ti td
    for n in 2 4; do
        settle "launch, $n ranks"
        # shellcheck disable=SC2046
        one "$n" $(gorun_cmd "$n") >/dev/null
        # shellcheck disable=SC2046
        one "$n" $(mpirun_cmd "$n") >/dev/null
        if [ -n "${GORUN_BASE:-}" ]; then
            one "$n" "$GORUN_BASE" -np "$n" >/dev/null
        fi
        : >"$stamp/rows.$n"
        : >"$stamp/topo.$n"
        : >"$stamp/base.$n"
        for i in $(seq "$runs"); do
            # shellcheck disable=SC2046
            g=$(one "$n" $(gorun_cmd "$n"))
            # shellcheck disable=SC2046
            m=$(one "$n" $(mpirun_cmd "$n"))
            read -r gi gw gm gd <<<"$g"
            read -r mi mw mm md <<<"$m"
            gr=$(ratio "$gi" "$mi")
            mr=$(ratio "$gw" "$mw")
            echo "$i $gi $mi $gr $gw $mw $mr $gm $mm $gd $md" >>"$stamp/rows.$n"
            echo "launch np=$n run $i: MPI_Init done gorun $gi ms mpirun $mi ms ratio $gr; wall gorun $gw ms mpirun $mw ms ratio $mr; last main() gorun $gm ms mpirun $mm ms; longest MPI_Init gorun $gd ms mpirun $md ms"
            if [ -n "${TOPO_XML:-}" ]; then
                # gorun again, its ranks reading the host's topology from
                # TOPO_XML (lstopo --of xml) instead of discovering it,
                # as mpirun's read prterun's (a diagnosis, not a figure)
                # shellcheck disable=SC2046
                t=$(one "$n" $(gorun_cmd "$n") -x HWLOC_XMLFILE="$TOPO_XML" -x HWLOC_THISSYSTEM=1)
                read -r ti _ _ td <<<"$t"
                echo "$i $ti $mi $(ratio "$ti" "$mi") $td" >>"$stamp/topo.$n"
                echo "launch np=$n run $i: gorun with HWLOC_XMLFILE: MPI_Init done $ti ms, ratio to mpirun's $(ratio "$ti" "$mi"); longest MPI_Init $td ms"
            fi
            if [ -n "${GORUN_BASE:-}" ]; then
                # the gorun to compare with, in the same run
                t=$(one "$n" "$GORUN_BASE" -np "$n")
                read -r ti tw tm td <<<"$t"
                echo "$i $ti $mi $(ratio "$ti" "$mi") $td $tw $tm $(ratio "$gi" "$ti")" >>"$stamp/base.$n"
                echo "launch np=$n run $i: GORUN_BASE: MPI_Init done $ti ms, ratio to mpirun's $(ratio "$ti" "$mi"); longest MPI_Init $td ms; wall $tw ms; last main() $tm ms; gorun/GORUN_BASE $(ratio "$gi" "$ti")"
            fi
        done
        done_series "launch, $n ranks"
        echo "launch np=$n, MPI_Init done, gorun ms: $(awk '{print $2}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, MPI_Init done, mpirun ms: $(awk '{print $3}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, MPI_Init done, gorun/mpirun: $(awk '{print $4}' "$stamp/rows.$n" | stats); per run: $(awk '{printf "%s ", $4}' "$stamp/rows.$n")"
        echo "launch np=$n, wall, gorun ms: $(awk '{print $5}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, wall, mpirun ms: $(awk '{print $6}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, wall, gorun/mpirun: $(awk '{print $7}' "$stamp/rows.$n" | stats); per run: $(awk '{printf "%s ", $7}' "$stamp/rows.$n")"
        echo "launch np=$n, last rank in main(), gorun ms: $(awk '{print $8}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, last rank in main(), mpirun ms: $(awk '{print $9}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, longest MPI_Init, gorun ms: $(awk '{print $10}' "$stamp/rows.$n" | stats)"
        echo "launch np=$n, longest MPI_Init, mpirun ms: $(awk '{print $11}' "$stamp/rows.$n" | stats)"
        if [ -n "${TOPO_XML:-}" ]; then
            echo "launch np=$n, gorun with HWLOC_XMLFILE, MPI_Init done ms: $(awk '{print $2}' "$stamp/topo.$n" | stats)"
            echo "launch np=$n, gorun with HWLOC_XMLFILE / mpirun: $(awk '{print $4}' "$stamp/topo.$n" | stats); per run: $(awk '{printf "%s ", $4}' "$stamp/topo.$n")"
            echo "launch np=$n, gorun with HWLOC_XMLFILE, longest MPI_Init ms: $(awk '{print $5}' "$stamp/topo.$n" | stats)"
        fi
        if [ -n "${GORUN_BASE:-}" ]; then
            echo "launch np=$n, GORUN_BASE, MPI_Init done ms: $(awk '{print $2}' "$stamp/base.$n" | stats)"
            echo "launch np=$n, GORUN_BASE / mpirun: $(awk '{print $4}' "$stamp/base.$n" | stats); per run: $(awk '{printf "%s ", $4}' "$stamp/base.$n")"
            echo "launch np=$n, GORUN_BASE, longest MPI_Init ms: $(awk '{print $5}' "$stamp/base.$n" | stats)"
            echo "launch np=$n, GORUN_BASE, last rank in main() ms: $(awk '{print $7}' "$stamp/base.$n" | stats)"
            echo "launch np=$n, gorun / GORUN_BASE: $(awk '{print $8}' "$stamp/base.$n" | stats); per run: $(awk '{printf "%s ", $8}' "$stamp/base.$n")"
        fi
    done
}

# ---- osu: OSU's latency and all-reduce at 2 ranks ----
part_osu() {
    [ -n "${OSU_DIR:-}" ] || { echo "openmpi5: osu needs OSU_DIR (see the top of this script)" >&2; return 1; }
    local lat=$OSU_DIR/mpi/pt2pt/osu_latency ar=$OSU_DIR/mpi/collective/osu_allreduce
    [ -x "$lat" ] && [ -x "$ar" ] || { echo "openmpi5: no $lat or $ar: build OSU (see the top of this script)" >&2; return 1; }
    local d=$out/osu sizes="8 4096 1048576"
    mkdir -p "$d"
    # one LOG command...: runs an OSU benchmark, keeps its output in LOG
    # without gorun's [rank] tags
    one() {
        local log=$1
        shift
        "$@" 2>"$log.err" | sed -E 's/^\[[0-9]+\] //' >"$log" || { echo "openmpi5: failed: $*" >&2; return 1; }
    }
    pick() { awk -v s="$2" '$1 == s {print $2}' "$1"; }
    settle "osu, 2 ranks"
    # shellcheck disable=SC2046
    one "$d/warm" $(gorun_cmd 2) "$lat"
    # shellcheck disable=SC2046
    one "$d/warm" $(mpirun_cmd 2) "$lat"
    : >"$d/rows"
    local i b s g m
    for i in $(seq "$runs_osu"); do
        # shellcheck disable=SC2046
        {
            one "$d/lat.gorun.$i" $(gorun_cmd 2) "$lat"
            one "$d/lat.mpirun.$i" $(mpirun_cmd 2) "$lat"
            one "$d/ar.gorun.$i" $(gorun_cmd 2) "$ar" -m 1048576
            one "$d/ar.mpirun.$i" $(mpirun_cmd 2) "$ar" -m 1048576
        }
        for b in lat ar; do
            for s in $sizes; do
                g=$(pick "$d/$b.gorun.$i" "$s")
                m=$(pick "$d/$b.mpirun.$i" "$s")
                echo "$b $s $i $g $m $(ratio "$g" "$m")" >>"$d/rows"
            done
        done
        echo "osu run $i: $(awk -v i="$i" '$3 == i {printf "%s %s gorun %s mpirun %s us (%s); ", $1, $2, $4, $5, $6}' "$d/rows")"
    done
    done_series "osu, 2 ranks"
    for b in lat ar; do
        for s in $sizes; do
            local name=osu_latency
            [ "$b" = ar ] && name=osu_allreduce
            echo "$name $s B, gorun us: $(awk -v b=$b -v s="$s" '$1 == b && $2 == s {print $4}' "$d/rows" | stats)"
            echo "$name $s B, mpirun us: $(awk -v b=$b -v s="$s" '$1 == b && $2 == s {print $5}' "$d/rows" | stats)"
            echo "$name $s B, gorun/mpirun: $(awk -v b=$b -v s="$s" '$1 == b && $2 == s {print $6}' "$d/rows" | stats); per run: $(awk -v b=$b -v s="$s" '$1 == b && $2 == s {printf "%s ", $6}' "$d/rows")"
        done
    done
}

# ---- mpi4py: its own test suite ----
part_mpi4py() {
    [ -n "${MPI4PY_DIR:-}" ] && [ -f "$MPI4PY_DIR/main.py" ] ||
        { echo "openmpi5: mpi4py needs MPI4PY_DIR, the test directory of mpi4py 4.0.3 (see the top of this script)" >&2; return 1; }
    /usr/bin/python3 -c 'import xmlrunner' 2>/dev/null ||
        { echo "openmpi5: mpi4py needs python3-xmlrunner in the root (see the top of this script)" >&2; return 1; }
    local d=$out/mpi4py
    mkdir -p "$d"
    # Every rank's XML report to one table: test, then its result on each
    # rank (pass, failure, error, skipped), and the counts of rank 0.
    cat >"$d/junit.py" <<'EOF'
import glob, os, sys
import xml.etree.ElementTree as ET
res = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.xml")):
    rank = int(f[:-4].rsplit("-", 1)[1])
    for tc in ET.parse(f).getroot().iter("testcase"):
        o = "pass"
        for ch in tc:
            if ch.tag in ("failure", "error", "skipped"):
                o = ch.tag
                break
        res.setdefault(tc.get("classname") + "." + tc.get("name"), {})[rank] = o
ranks = sorted({r for v in res.values() for r in v})
with open(sys.argv[2], "w") as t:
    for name in sorted(res):
        t.write(name + "\t" + "/".join(res[name].get(r, "missing") for r in ranks) + "\n")
c = {}
for v in res.values():
    o = v.get(0, "missing")
    c[o] = c.get(o, 0) + 1
same = all(len(set(v.values())) == 1 and len(v) == len(ranks) for v in res.values())
print("tests %d: pass %d, failure %d, error %d, skipped %d (rank 0; %d ranks reported, %s)" % (
    len(res), c.get("pass", 0), c.get("failure", 0), c.get("error", 0), c.get("skipped", 0),
    len(ranks), "every rank the same" if same else "ranks differ"))
EOF
    # one NAME N TAG TIMEOUT ARGS command...: one run of the suite with
    # main.py's ARGS (one word) under command; prints its seconds
    one() {
        local name=$1 n=$2 tag=$3 limit=$4 args=$5
        shift 5
        local w=$d/$name.np$n.$tag t0 t1 rc=0
        rm -rf "$w"
        mkdir -p "$w/xml" # made here: the ranks' xmlrunners race to make it, and the loser's reports are lost
        t0=$(now_us)
        # shellcheck disable=SC2086
        (cd "$MPI4PY_DIR" && timeout -k 10 "$limit" "$@" /usr/bin/python3 main.py $args --xml "$w/xml" >"$w/log" 2>&1) || rc=$?
        t1=$(now_us)
        echo "$rc" >"$w/rc"
        /usr/bin/python3 "$d/junit.py" "$w/xml" "$w/tests" >"$w/counts"
        awk -v a=$((t1 - t0)) 'BEGIN {printf "%.1f", a / 1e6}'
    }
    # differ N TAG: the tests whose result differs between the launchers
    differ() {
        echo "mpi4py np=$1 $2, tests whose result differs (test, gorun per rank, mpirun per rank):"
        local l
        for l in gorun mpirun; do
            if [ ! -s "$d/$l.np$1.$2/tests" ]; then
                echo "  no report from $l (exit $(cat "$d/$l.np$1.$2/rc")): see $d/$l.np$1.$2/log"
                return
            fi
        done
        LC_ALL=C join -t "$(printf '\t')" -a1 -a2 -e absent -o 0,1.2,2.2 \
            <(LC_ALL=C sort "$d/gorun.np$1.$2/tests") <(LC_ALL=C sort "$d/mpirun.np$1.$2/tests") |
            awk -F'\t' '$2 != $3 {print "  " $1 "\t" $2 "\t" $3}'
    }
    show() { echo "mpi4py np=$1 $2: $3 $4 s (exit $(cat "$d/$3.np$1.$2/rc")) $(cat "$d/$3.np$1.$2/counts")"; }
    # The whole suite once under each launcher, with a timeout (a run that
    # hangs is killed: exit 124 and no report), verbose so that the log
    # shows where each rank was; then ROUNDS timed pairs of the suite
    # without its dynamic-process modules (test_dynproc, test_spawn), which
    # gorun does not serve (docs/mpi.md) and mpirun serves only with free
    # slots.
    local n r g m limit=${MPI4PY_TIMEOUT:-420}
    for n in 2 3; do
        settle "mpi4py, $n ranks, whole suite"
        # shellcheck disable=SC2046
        g=$(one gorun "$n" full "$limit" -v $(gorun_cmd "$n"))
        # shellcheck disable=SC2046
        m=$(one mpirun "$n" full "$limit" -v $(mpirun_cmd "$n"))
        show "$n" full gorun "$g"
        show "$n" full mpirun "$m"
        differ "$n" full
        settle "mpi4py, $n ranks, without test_dynproc and test_spawn"
        : >"$d/rows.$n"
        for r in $(seq "$rounds"); do
            # shellcheck disable=SC2046
            g=$(one gorun "$n" "r$r" "$limit" "-e dynproc -e spawn" $(gorun_cmd "$n"))
            # shellcheck disable=SC2046
            m=$(one mpirun "$n" "r$r" "$limit" "-e dynproc -e spawn" $(mpirun_cmd "$n"))
            echo "$r $g $m $(ratio "$g" "$m")" >>"$d/rows.$n"
            show "$n" "r$r" gorun "$g"
            show "$n" "r$r" mpirun "$m"
        done
        done_series "mpi4py, $n ranks"
        echo "mpi4py np=$n, without test_dynproc and test_spawn, gorun/mpirun time: $(awk '{print $4}' "$d/rows.$n" | stats); per round: $(awk '{printf "%s ", $4}' "$d/rows.$n")"
        for r in $(seq "$rounds"); do
            differ "$n" "r$r"
        done
    done
}

# ---- mpich: MPICH's test suite, built with Open MPI ----
part_mpich() {
    [ -n "${MPICH_DIR:-}" ] && [ -f "$MPICH_DIR/util/mtest.c" ] ||
        { echo "openmpi5: mpich needs MPICH_DIR, MPICH v4.2.1's test/mpi (see the top of this script)" >&2; return 1; }
    local d=$out/mpich b
    b=$d/build
    rm -rf "$d"
    mkdir -p "$b/include" "$b/bin" "$d/logs"
    # What configure would find with Open MPI on Debian 13; USE_STRICT_MPI
    # leaves MPICH's own extensions out.
    cat >"$b/include/mpitestconf.h" <<'EOF'
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STRDUP 1
#define HAVE_USLEEP 1
#define HAVE_GETRUSAGE 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_MPI_IO 1
#define HAVE_MPI_SPAWN 1
#define USE_STRICT_MPI 1
#define POINTERINT_t long
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
EOF
    : >"$b/include/mtest_mpix.h"
    local cflags=(-O1 -w -I "$b/include" -I "$MPICH_DIR/include")
    local u
    for u in mtest mtest_common mtest_single; do
        mpicc "${cflags[@]}" -c -o "$b/$u.o" "$MPICH_DIR/util/$u.c"
    done
    # The tests: DIR PROG NP ARGS... from the testlists, up to 4 ranks,
    # without env= lines, the first of each (prog, np, args).
    local dir f line
    : >"$d/list"
    for dir in coll pt2pt comm init group attr topo; do
        f=$MPICH_DIR/$dir/testlist.in
        [ -f "$f" ] || f=$MPICH_DIR/$dir/testlist
        grep -v '^\s*#' "$f" | grep -v '^\s*$' | grep -v '@' | grep -v 'env=' |
            awk -v dir="$dir" '$2 <= 4 {
                a = ""; t = ""; r = "TestNormal"
                for (i = 3; i <= NF; i++) {
                    if ($i ~ /^arg=/) a = a " " substr($i, 5)
                    else if ($i ~ /^timeLimit=/) t = substr($i, 11)
                    else if ($i ~ /^resultTest=/) r = substr($i, 12)
                }
                k = $1 " " $2 " " a
                if (!(k in seen)) { seen[k] = 1; print dir "|" $1 "|" $2 "|" t "|" r "|" a }
            }' >>"$d/list"
    done
    # Build each program once: its source and flags from its Makefile.am
    # (PROG_SOURCES, PROG_CPPFLAGS), else PROG.c.
    local prog src cpp built=0 failed=0
    while IFS='|' read -r dir prog _; do
        [ -e "$b/bin/$dir.$prog" ] || [ -e "$b/bin/$dir.$prog.failed" ] && continue
        src=$(sed -n "s/^${prog}_SOURCES *= *//p" "$MPICH_DIR/$dir/Makefile.am" | head -1)
        [ -n "$src" ] || src=$prog.c
        cpp=$(sed -n "s/^${prog}_CPPFLAGS *= *//p" "$MPICH_DIR/$dir/Makefile.am" | head -1 | sed 's/\$(AM_CPPFLAGS)//')
        # shellcheck disable=SC2086
        if (cd "$MPICH_DIR/$dir" && mpicc "${cflags[@]}" $cpp -o "$b/bin/$dir.$prog" $src "$b"/mtest*.o -lm) >"$b/bin/$dir.$prog.log" 2>&1; then
            built=$((built + 1))
        else
            touch "$b/bin/$dir.$prog.failed"
            failed=$((failed + 1))
        fi
    done <"$d/list"
    echo "mpich: $(wc -l <"$d/list") tests of $(cut -d'|' -f1,2 "$d/list" | sort -u | wc -l) programs listed; $built programs built, $failed did not build (logs in $b/bin)"
    # judge RESULTTEST RC LOG: pass, fail, skip or timeout, as MPICH's
    # runtests would, but reading past gorun's [rank] tags and ignoring
    # stray lines (Open MPI prints warnings under both launchers).
    judge() {
        local rt=$1 rc=$2 log=$3 noerr skip
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && { echo timeout; return; }
        noerr=$(sed -E 's/^\[[0-9]+\] //' "$log" | grep -cE '^\s*No [Ee]rrors\s*$' || true)
        skip=$(sed -E 's/^\[[0-9]+\] //' "$log" | grep -cE '^\s*Test Skipped\s*$' || true)
        case "$rt" in
            TestStatus | TestErrFatal)
                [ "$rc" != 0 ] && echo pass || echo fail
                ;;
            *)
                if [ "$rc" = 0 ] && [ "$noerr" -gt 0 ]; then
                    echo pass
                elif [ "$rc" = 0 ] && [ "$skip" -gt 0 ]; then
                    echo skip
                else
                    echo fail
                fi
                ;;
        esac
    }
    settle "mpich, up to 4 ranks"
    local np tl rt args t name lg cmd t0 t1 rc res tg
    : >"$d/rows"
    while IFS='|' read -r dir prog np tl rt args; do
        [ -e "$b/bin/$dir.$prog" ] || continue
        t=${tl:-$timeout_s}
        name=$dir/$prog.np$np$(echo "$args" | tr ' =' '_:')
        tg=""
        for lg in gorun mpirun; do
            if [ "$lg" = gorun ]; then cmd=$(gorun_cmd "$np"); else cmd=$(mpirun_cmd "$np"); fi
            rc=0
            t0=$(now_us)
            # shellcheck disable=SC2086
            (cd "$MPICH_DIR/$dir" && timeout -k 5 "$t" $cmd "$b/bin/$dir.$prog" $args) \
                >"$d/logs/$(echo "$name" | tr '/' '.').$lg" 2>&1 </dev/null || rc=$?
            t1=$(now_us)
            res=$(judge "$rt" "$rc" "$d/logs/$(echo "$name" | tr '/' '.').$lg")
            tg="$tg$res $rc $(awk -v a=$((t1 - t0)) 'BEGIN {printf "%.3f", a / 1e6}') "
        done
        echo "$name $tg" >>"$d/rows"
    done <"$d/list"
    done_series "mpich, up to 4 ranks"
    # rows: NAME gorun-result rc seconds mpirun-result rc seconds
    for lg in gorun mpirun; do
        local c=2
        [ "$lg" = mpirun ] && c=5
        echo "mpich $lg: $(wc -l <"$d/rows") tests: $(awk -v c=$c '{n[$c]++} END {for (k in n) printf "%s %d, ", k, n[k]}' "$d/rows")total $(awk -v c=$((c + 2)) '{s += $c} END {printf "%.1f", s}' "$d/rows") s"
    done
    echo "mpich gorun/mpirun time per test (both passed): $(awk '$2 == "pass" && $5 == "pass" {printf "%.3f\n", $4 / $7}' "$d/rows" | stats)"
    echo "mpich tests whose result differs (test, gorun result exit s, mpirun result exit s):"
    awk '$2 != $5 {print "  " $0}' "$d/rows"
    echo "mpich tests that failed under both:"
    awk '$2 == $5 && $2 != "pass" {print "  " $0}' "$d/rows"
}

for p in "${parts[@]}"; do
    case "$p" in
        launch | osu | mpi4py | mpich) "part_$p" ;;
        *)
            echo "openmpi5: unknown part $p (launch, osu, mpi4py, mpich)" >&2
            exit 2
            ;;
    esac
done
