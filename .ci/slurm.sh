#!/usr/bin/env bash
# A real Slurm cluster on this one host, for CI and tests/slurm: munged, slurmctld and
# slurmd, one partition, no accounting (no slurmdbd), no cgroups (proctrack/linuxproc).
#
#   sudo bash .ci/slurm.sh          # idempotent: safe to run twice; prints the nodes (sinfo)
#
# Installs Debian's slurm-wlm and munge with apt-get when they are missing, writes
# /etc/slurm/slurm.conf for this host (NodeName=$(hostname -s) with the CPUs and memory that
# `slurmd -C` reports), starts whichever daemon is not running (restarting slurmctld/slurmd
# only when the config changed), and waits until `sinfo` shows every node up.
#
# Besides the real node it defines SHARDSCOPE_SLURM_EXTRA_NODES (default 2) virtual
# nodes ${NODE}-v1, ${NODE}-v2 served by extra slurmd processes on this same host (Debian
# builds Slurm with multiple-slurmd support), so that one job can really span two nodes:
# `srun --nodes 2 --ntasks-per-node 1` runs one task per node, as on a real cluster. They
# weigh more than the real node, so single-node jobs land on the real node first.
set -euo pipefail

PARTITION="${SHARDSCOPE_SLURM_PARTITION:-debug}"
CONF=/etc/slurm/slurm.conf
NODE="$(hostname -s)"
WAIT_S="${SHARDSCOPE_SLURM_WAIT_S:-60}"
EXTRA_NODES="${SHARDSCOPE_SLURM_EXTRA_NODES:-2}"
[[ "$EXTRA_NODES" =~ ^[0-9]$ ]] || { echo "slurm.sh: SHARDSCOPE_SLURM_EXTRA_NODES must be 0-9, not '$EXTRA_NODES'" >&2; exit 1; }

log() { echo "slurm.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[[ "$(id -u)" -eq 0 ]] || die "must run as root (it installs packages and starts daemons)"

install_packages() {
    local missing=0
    for tool in munged munge unmunge slurmctld slurmd sinfo sbatch srun squeue scontrol; do
        command -v "$tool" >/dev/null 2>&1 || missing=1
    done
    [[ $missing -eq 0 ]] && return
    command -v apt-get >/dev/null 2>&1 || die "slurm-wlm/munge are missing and apt-get is not available"
    log "installing slurm-wlm and munge with apt-get"
    # Debian starts services at install time where it can; we start them ourselves below.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

alive() {  # alive PIDFILE: the pid in PIDFILE is a running process
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

start_munge() {
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge /var/log/munge /var/lib/munge
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return
    fi
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged does not answer; see /var/log/munge/munged.log"
}

config_text() {  # the slurm.conf this host should have
    local node_line
    node_line="$(slurmd -C | head -n 1)"
    [[ "$node_line" == NodeName=* ]] || die "slurmd -C did not describe this node: $node_line"
    # slurmd -C prints the node as `hostname`; name it by the short hostname, as sinfo shows it.
    node_line="NodeName=${NODE} ${node_line#NodeName=* }"
    # Virtual nodes: aliases of this machine, with its CPUs and memory (they share them, which
    # is fine for tests that run one job at a time).
    local cpus mem extra="" i
    cpus="$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")"
    mem="$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")"
    for ((i = 1; i <= EXTRA_NODES; i++)); do
        extra+="NodeName=${NODE}-v${i} NodeHostname=${NODE} NodeAddr=${NODE} Port=$((6818 + i)) CPUs=${cpus} RealMemory=${mem} Weight=100 State=UNKNOWN"$'\n'
    done
    local wanted
    wanted="$(cat <<EOF
# Written by .ci/slurm.sh: a Slurm cluster on this one host for shardscope's tests. Do not edit; rerun it.
ClusterName=shardscope
SlurmctldHost=${NODE}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# No cgroups: processes are tracked through /proc, tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# No accounting (no slurmdbd): snakemake needs --slurm-status-command squeue, and squeue must
# still list a finished job when snakemake asks, hence MinJobAge well above its poll interval.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
DefMemPerCPU=1024
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
${node_line} Weight=1 State=UNKNOWN
${extra}PartitionName=${PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)"
    printf '%s\n' "$wanted"
}

update_config() {  # a changed config: stop the daemons first, so none keeps running the old one
    local wanted pidfile
    wanted="$(config_text)"
    install -d -m 0755 /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
    if [[ -f "$CONF" ]] && [[ "$(cat "$CONF")" == "$wanted" ]]; then
        return
    fi
    for pidfile in /run/slurmd-*.pid; do  # also those of nodes the new config drops
        [[ -e "$pidfile" ]] && stop_daemon "slurmd $(basename "$pidfile" .pid | sed 's/^slurmd-//')" "$pidfile"
    done
    stop_daemon slurmctld /run/slurmctld.pid
    printf '%s\n' "$wanted" > "$CONF.tmp" && mv "$CONF.tmp" "$CONF"
    log "wrote $CONF"
}

stop_daemon() {  # stop_daemon NAME PIDFILE: stop the daemon this script started, by its pid
    alive "$2" || return 0
    local pid
    pid="$(cat "$2")"
    log "stopping $1 (the config changed)"
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    die "$1 (pid $pid) did not stop"
}

start_daemons() {  # whichever of slurmctld and the slurmds is not running
    local node
    if ! alive /run/slurmctld.pid; then
        log "starting slurmctld"
        /usr/sbin/slurmctld
    fi
    for node in $(all_nodes); do
        if ! alive "/run/slurmd-$node.pid"; then
            log "starting slurmd for node $node"
            install -d -m 0755 "/var/lib/slurm/slurmd/$node"
            /usr/sbin/slurmd -N "$node"
        fi
    done
}

all_nodes() {  # the node names this script configures, the real node first
    local i
    echo "$NODE"
    for ((i = 1; i <= EXTRA_NODES; i++)); do echo "${NODE}-v${i}"; done
}

node_up() {  # node_up NODE: the node answers and takes jobs; resumes it if it is down
    local state
    state="$(sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n 1 || true)"
    case "$state" in
        idle|mixed|allocated|completing) return 0 ;;
        down*|drain*) scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    return 1
}

wait_until_up() {
    local node pending
    for _ in $(seq $((WAIT_S * 2))); do
        pending=""
        for node in $(all_nodes); do node_up "$node" || pending+=" $node"; done
        if [[ -z "$pending" ]]; then
            log "nodes $(all_nodes | paste -sd, -) are up in partition $PARTITION"
            sinfo -N -o "%N %T %c %m %P" >&2
            return
        fi
        sleep 0.5
    done
    die "node(s)${pending} not up after ${WAIT_S}s; see /var/log/slurm/slurmctld.log and slurmd-*.log"
}

install_packages
start_munge
update_config
start_daemons
wait_until_up
