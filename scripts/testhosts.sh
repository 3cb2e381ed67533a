#!/usr/bin/env bash
# testhosts.sh: several SSH-reachable test hosts on this one Linux machine,
# for gorun's end-to-end tests and benchmarks, and for trying a multi-host
# job without a cluster. Needs root, iproute2 and openssh-server.
#
#   bash scripts/testhosts.sh up N [--slots S] [--rate RATE] [--delay D]
#                                   (RATE: e.g. 1gbit, 100mbit; D: e.g. 5ms)
#   bash scripts/testhosts.sh delay D                          (change it while up; 0: none)
#   bash scripts/testhosts.sh down
#   bash scripts/testhosts.sh status                           (exit 0 up, 3 down)
#   bash scripts/testhosts.sh exec I CMD...                    (run CMD inside host I)
#   bash scripts/testhosts.sh slurm                            (a Slurm cluster on the hosts that are up)
#
# Host I (1..N) is network namespace gr-hI with its own sshd, hostname hI and
# address 198.18.0.(10+I) (RFC 2544's benchmarking range; nothing else is
# used). Every host's veth joins bridge gr-br0 (198.18.0.1, this machine's
# side). With --rate each host's link is limited to RATE in both directions
# (tc tbf), like a switch port. With --delay every packet a host receives
# waits D first (one way D between hosts, a round trip 2D): an iptables
# NFQUEUE rule and scripts/delayline in the host, built with go, as this
# kernel may have no netem. State lives in $TESTNET_DIR (default
# /tmp/gorun-testhosts):
#   hostfile    "198.18.0.11 slots=S" per host, for gorun -hostfile
#   ssh_config  for ssh -F (its own keys and known_hosts; ~/.ssh is not read)
#   bin/ssh     ssh with that config, for gorun --ssh
#   env         shell variables: TESTNET_HOSTFILE, TESTNET_SSH, TESTNET_HOSTS, ...
#   hI/         host I's sshd config, pid file and log
#
# Many hosts that all talk to each other need many neighbour (ARP) entries,
# and the kernel's table is shared by every namespace: `up` raises
# net.ipv4.neigh.default.gc_thresh1..3 so that 64+ hosts do not overflow it
# (an overflow drops packets, which looks like dial timeouts).
#
# `slurm` makes the hosts that are up a Slurm cluster (Debian's slurmctld,
# slurmd, slurm-client and munge): one munged and slurmctld on this machine
# at the bridge's address, one slurmd per host started in its network
# namespace (nsenter: under `ip netns exec` slurmd finds no cgroup file
# system) with its hostname, node hI with S CPUs in partition `test`, proctrack/linuxproc and
# task/none. Its config is $DIR/slurm/slurm.conf: set SLURM_CONF to it (the
# env file has TESTNET_SLURM_CONF) and salloc, sbatch, srun, squeue and
# scancel run jobs on the hosts. `down` stops it with the hosts.
set -euo pipefail

DIR=${TESTNET_DIR:-/tmp/gorun-testhosts}
DIR=${DIR%/}
PFX=gr
BR=$PFX-br0
NET=198.18.0
SSHD=/usr/sbin/sshd
REPO=$(cd "$(dirname "$0")/.." && pwd)
MARK=.gorun-testhosts # a directory holding it is ours to delete

die() { echo "testhosts: $*" >&2; exit 1; }
ns() { echo "$PFX-h$1"; }
addr() { echo "$NET.$((10 + $1))"; }

need() {
    [ "$(id -u)" = 0 ] || die "must run as root"
    local t
    for t in ip tc ssh ssh-keygen unshare flock "$SSHD"; do
        command -v "$t" >/dev/null 2>&1 || die "missing $t: apt-get install -y iproute2 openssh-server openssh-client util-linux"
    done
}

# One rig per machine (kernel names are global): serialise on this script.
lock() {
    exec 9<"$0"
    flock -w 120 9 || die "another testhosts.sh is still running"
}

down() {
    local f pid n
    slurm_down
    for f in "$DIR"/h*/sshd.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PFX-h[0-9]*$" || true); do
        # Whatever still runs in the host (ranks, agents) goes with it.
        ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$n" 2>/dev/null || true
        rm -rf "/etc/netns/$n"
    done
    # A namespace that a dying process still holds keeps its veth pair
    # for a moment after `ip netns del`: delete this machine's ends (and
    # with them their peers), or the next `up` finds them taken.
    for n in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$PFX-h[0-9]*$" || true); do
        ip link del "$n" 2>/dev/null || true
    done
    ip link del "$BR" 2>/dev/null || true
    if [ -f "$DIR/$MARK" ]; then
        rm -rf "$DIR"
    fi
}

slurm_down() {
    local f pid
    [ -d "$DIR/slurm" ] || return 0
    for f in "$DIR"/slurm/*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    sleep 0.2
    for f in "$DIR"/slurm/*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null || true)
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$DIR/slurm"
    [ ! -f "$DIR/env" ] || sed -i '/^TESTNET_SLURM_CONF=/d' "$DIR/env"
}

# slurm: a Slurm cluster of the hosts that are up (see the top).
slurm_up() {
    local d=$DIR/slurm i t ok state cpus
    for t in munged slurmctld slurmd sinfo srun nsenter; do
        command -v "$t" >/dev/null 2>&1 || die "missing $t: apt-get install -y munge slurmctld slurmd slurm-client"
    done
    [ -f "$DIR/env" ] || die "slurm: no test hosts are up in $DIR"
    # shellcheck disable=SC1091
    . "$DIR/env"
    slurm_down
    mkdir -p "$d/ctld"
    dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 2>/dev/null
    chmod 600 "$d/munge.key"
    munged -f --key-file="$d/munge.key" --socket="$d/munge.sock" --pid-file="$d/munged.pid" \
        --log-file="$d/munged.log" --seed-file="$d/munged.seed" 9<&- || die "munged did not start; see $d/munged.log"
    cpus=${TESTNET_SLOTS:-1}
    {
        echo "# Written by scripts/testhosts.sh slurm: a test cluster of $TESTNET_N hosts."
        echo "ClusterName=gorun"
        echo "SlurmctldHost=$(hostname -s)($NET.1)"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$d/munge.sock"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$d/ctld"
        echo "SlurmdSpoolDir=$d/spool-%n"
        echo "SlurmctldPidFile=$d/slurmctld.pid"
        echo "SlurmdPidFile=$d/slurmd-%n.pid"
        echo "SlurmctldLogFile=$d/slurmctld.log"
        echo "SlurmdLogFile=$d/slurmd-%n.log"
        echo "SlurmctldPort=6817"
        echo "SlurmdPort=6818"
        echo "SlurmdParameters=config_overrides"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SwitchType=switch/none"
        echo "MpiDefault=none"
        echo "SchedulerType=sched/backfill"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "ReturnToService=2"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "JobCompType=jobcomp/none"
        echo "InactiveLimit=0"
        echo "KillWait=5"
        echo "MinJobAge=10"
        echo "SlurmctldTimeout=120"
        echo "SlurmdTimeout=120"
        for i in $(seq 1 "$TESTNET_N"); do
            echo "NodeName=h$i NodeAddr=$(addr "$i") CPUs=$cpus RealMemory=1000 State=UNKNOWN"
        done
        echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } > "$d/slurm.conf"
    slurmctld -f "$d/slurm.conf" 9<&- || die "slurmctld did not start; see $d/slurmctld.log"
    for i in $(seq 1 "$TESTNET_N"); do
        # Its own hostname too, as sshd has (Open MPI names its shared
        # memory after the host: nodes all called this machine's name
        # would share each other's segments).
        nsenter --net="/run/netns/$(ns "$i")" unshare --uts sh -c "hostname h$i && exec slurmd -f '$d/slurm.conf' -N h$i" 9<&- ||
            die "slurmd of h$i did not start; see $d/slurmd-h$i.log"
    done
    echo "TESTNET_SLURM_CONF='$d/slurm.conf'" >> "$DIR/env"
    # Every node idle before slurm returns.
    ok=0
    for _ in $(seq 1 300); do
        state=$(SLURM_CONF="$d/slurm.conf" sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ') || true
        if [ "$state" = "idle " ]; then ok=1; break; fi
        sleep 0.2
    done
    [ "$ok" = 1 ] || die "slurm: nodes not idle after 60 s (${state:-no answer}); see $d/*.log"
    echo "testhosts: Slurm up on $TESTNET_N hosts ($cpus CPUs each); SLURM_CONF=$d/slurm.conf" >&2
}

raise_neigh_limits() {
    local n=$1 k cur want
    for k in 1 2 3; do
        want=$(( (n + 8) * 64 * k ))
        cur=$(cat /proc/sys/net/ipv4/neigh/default/gc_thresh$k)
        [ "$cur" -ge "$want" ] || echo "$want" > /proc/sys/net/ipv4/neigh/default/gc_thresh$k
    done
}

# shape DEV [NETNS]: a tbf of RATE on DEV's egress, 1 ms of burst (at least
# 128 KiB) and 5 ms of queue at line rate.
shape() {
    local dev=$1 netns=${2:-} bits bytes burst limit
    bits=$(rate_bits "$RATE")
    bytes=$((bits / 8))
    burst=$((bytes / 1000)); [ "$burst" -ge 131072 ] || burst=131072
    limit=$((bytes / 200)); [ "$limit" -ge $((2 * burst)) ] || limit=$((2 * burst))
    if [ -n "$netns" ]; then
        ip netns exec "$netns" tc qdisc replace dev "$dev" root tbf rate "$RATE" burst "$burst" limit "$limit"
    else
        tc qdisc replace dev "$dev" root tbf rate "$RATE" burst "$burst" limit "$limit"
    fi
}

rate_bits() {
    local r=${1,,} n
    n=${r%%[a-z]*}
    case "${r#"$n"}" in
        gbit) echo $((n * 1000000000)) ;;
        mbit) echo $((n * 1000000)) ;;
        kbit) echo $((n * 1000)) ;;
        bit | "") echo "$n" ;;
        *) die "rate $1: use NNNgbit, NNNmbit or NNNkbit" ;;
    esac
}

# The delay line's binary, built once per rig.
build_delayline() {
    command -v iptables >/dev/null 2>&1 || die "--delay needs iptables: apt-get install -y iptables"
    command -v go >/dev/null 2>&1 || die "--delay needs go, to build scripts/delayline"
    [ -x "$DIR/bin/delayline" ] || (cd "$REPO" && go build -o "$DIR/bin/delayline" ./scripts/delayline) ||
        die "building scripts/delayline failed"
}

# set_delay I D: host I's received packets wait D (0: not at all).
set_delay() {
    local i=$1 d=$2 h pid
    h=$(ns "$i")
    if [ -f "$DIR/h$i/delayline.pid" ]; then
        pid=$(cat "$DIR/h$i/delayline.pid")
        kill "$pid" 2>/dev/null || true
        rm -f "$DIR/h$i/delayline.pid"
    fi
    ip netns exec "$h" iptables -t mangle -D PREROUTING -i eth0 -j NFQUEUE --queue-num 0 2>/dev/null || true
    [ "$d" != 0 ] || return 0
    # The line first, then the rule: packets never wait for a reader.
    ip netns exec "$h" "$DIR/bin/delayline" -queue 0 -delay "$d" > "$DIR/h$i/delayline.log" 2>&1 9<&- &
    echo $! > "$DIR/h$i/delayline.pid"
    sleep 0.1
    kill -0 "$(cat "$DIR/h$i/delayline.pid")" 2>/dev/null || die "host h$i: delayline did not start: $(cat "$DIR/h$i/delayline.log")"
    ip netns exec "$h" iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0
}

valid_delay() {
    [[ "$1" == 0 || "$1" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "delay $1: use e.g. 500us, 5ms or 0.1s"
}

up() {
    local n=$1 i h a key
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: N must be 1..200, not $n"
    down
    mkdir -p "$DIR/bin" && touch "$DIR/$MARK"
    [ "$DELAY" = 0 ] || build_delayline
    raise_neigh_limits "$n"
    mkdir -p /run/sshd

    ssh-keygen -q -t ed25519 -N '' -f "$DIR/host_key" -C gorun-testhosts
    ssh-keygen -q -t ed25519 -N '' -f "$DIR/client_key" -C gorun-testhosts
    cp "$DIR/client_key.pub" "$DIR/authorized_keys"
    chmod 600 "$DIR/authorized_keys"
    key=$(cut -d' ' -f1,2 "$DIR/host_key.pub")

    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    sysctl -qw "net.ipv6.conf.$BR.disable_ipv6=1" 2>/dev/null || true
    ip link set "$BR" up

    : > "$DIR/hostfile"
    : > "$DIR/known_hosts"
    {
        echo "Host *"
        echo "    User root"
        echo "    IdentityFile $DIR/client_key"
        echo "    IdentitiesOnly yes"
        echo "    UserKnownHostsFile $DIR/known_hosts"
        echo "    StrictHostKeyChecking yes"
        echo "    BatchMode yes"
        echo "    LogLevel ERROR"
        echo "    ConnectTimeout 10"
    } > "$DIR/ssh_config"
    local hosts=""
    for i in $(seq 1 "$n"); do
        h=$(ns "$i")
        a=$(addr "$i")
        ip netns add "$h"
        ip link add "$h" type veth peer name eth0 netns "$h"
        ip link set "$h" master "$BR"
        sysctl -qw "net.ipv6.conf.$h.disable_ipv6=1" 2>/dev/null || true
        ip link set "$h" up
        ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
        ip netns exec "$h" ip addr add "$a/24" dev eth0
        ip netns exec "$h" ip link set eth0 up
        ip netns exec "$h" ip link set lo up
        if [ -n "$RATE" ]; then
            shape eth0 "$h"
            shape "$h"
        fi
        if [ "$DELAY" != 0 ]; then
            mkdir -p "$DIR/h$i"
            set_delay "$i" "$DELAY"
        fi
        mkdir -p "/etc/netns/$h" "$DIR/h$i"
        {
            echo "127.0.0.1 localhost"
            echo "$NET.1 launcher"
            for j in $(seq 1 "$n"); do echo "$(addr "$j") h$j"; done
        } > "/etc/netns/$h/hosts"
        cat > "$DIR/h$i/sshd_config" <<EOF
ListenAddress $a
HostKey $DIR/host_key
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $DIR/h$i/sshd.pid
MaxStartups 200:30:400
MaxSessions 200
AcceptEnv LANG LC_*
EOF
        # Its own hostname (a UTS namespace); sshd daemonizes inside it. The
        # lock's descriptor is not handed on.
        ip netns exec "$h" unshare --uts sh -c "hostname h$i && exec $SSHD -f '$DIR/h$i/sshd_config' -E '$DIR/h$i/sshd.log'" 9<&-
        echo "$a,h$i $key" >> "$DIR/known_hosts"
        printf 'Host h%s\n    HostName %s\n' "$i" "$a" >> "$DIR/ssh_config"
        echo "$a slots=$SLOTS" >> "$DIR/hostfile"
        hosts+="${hosts:+ }$a"
    done
    printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$DIR/ssh_config" > "$DIR/bin/ssh"
    chmod +x "$DIR/bin/ssh"
    cat > "$DIR/env" <<EOF
TESTNET_DIR='$DIR'
TESTNET_N=$n
TESTNET_HOSTS='$hosts'
TESTNET_HOSTFILE='$DIR/hostfile'
TESTNET_SSH='ssh -F $DIR/ssh_config'
TESTNET_RATE='$RATE'
TESTNET_DELAY='$DELAY'
TESTNET_SLOTS=$SLOTS
EOF
    # Every sshd answers before up returns.
    for i in $(seq 1 "$n"); do
        local ok=0
        for _ in $(seq 1 100); do
            if ssh -F "$DIR/ssh_config" "$(addr "$i")" true 2>/dev/null; then ok=1; break; fi
            sleep 0.1
        done
        [ "$ok" = 1 ] || die "host h$i ($(addr "$i")) does not answer ssh; see $DIR/h$i/sshd.log"
    done
    echo "testhosts: $n hosts up (${RATE:-unlimited}, delay $DELAY); hostfile $DIR/hostfile, ssh $DIR/bin/ssh" >&2
}

cmd=${1:-}
shift || true
case "$cmd" in
    up)
        [ $# -ge 1 ] || die "usage: up N [--slots S] [--rate RATE] [--delay D]"
        N=$1; shift
        SLOTS=1 RATE="" DELAY=0
        while [ $# -gt 0 ]; do
            case "$1" in
                --slots) SLOTS=${2:?}; shift 2 ;;
                --rate) RATE=${2:?}; shift 2 ;;
                --delay) DELAY=${2:?}; valid_delay "$DELAY"; shift 2 ;;
                *) die "up: unknown option $1" ;;
            esac
        done
        [[ "$SLOTS" =~ ^[0-9]+$ ]] && [ "$SLOTS" -ge 1 ] || die "up: --slots must be a positive number"
        [ -z "$RATE" ] || rate_bits "$RATE" >/dev/null
        need; lock; up "$N" ;;
    delay)
        [ $# -eq 1 ] || die "usage: delay D (0: none)"
        valid_delay "$1"
        need; lock
        [ -f "$DIR/env" ] || die "no test hosts are up in $DIR"
        # shellcheck disable=SC1091
        . "$DIR/env"
        [ "$1" = 0 ] || build_delayline
        for i in $(seq 1 "$TESTNET_N"); do set_delay "$i" "$1"; done
        sed -i "s/^TESTNET_DELAY=.*/TESTNET_DELAY='$1'/" "$DIR/env"
        echo "testhosts: delay $1 on $TESTNET_N hosts" >&2 ;;
    down) need; lock; down ;;
    slurm) need; lock; slurm_up ;;
    status)
        if ip netns list 2>/dev/null | grep -q "^$PFX-h1\b"; then echo up; exit 0; fi
        echo down; exit 3 ;;
    exec)
        [ $# -ge 2 ] || die "usage: exec I CMD..."
        i=$1; shift
        exec ip netns exec "$(ns "$i")" "$@" ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
