#!/usr/bin/env bash
# A private Slurm cluster on this one host, for CI and tests/slurm: its own munged, slurmctld
# and slurmd processes, one partition, no accounting (no slurmdbd), no cgroups
# (proctrack/linuxproc). It never touches the machine's own Slurm or munge: everything lives
# in one folder, $SHARDSCOPE_SLURM_DIR (default /run/shardscope-slurm):
#
#   slurm.conf  munge.key  run/ (pid files, munge socket)  state/  spool/  log/
#   bin/        srun, sbatch, squeue, scontrol, sinfo, scancel wrappers that point Slurm's
#               commands at this slurm.conf (SLURM_CONF); put bin/ first on PATH.
#
# and it listens on its own ports ($SHARDSCOPE_SLURM_PORT, default 6917, and the next ones), so a
# real cluster's /etc/slurm/slurm.conf, /etc/munge/munge.key and daemons stay as they are.
#
#   sudo bash .ci/slurm.sh install   # apt-get install slurm-wlm and munge when missing (CI only)
#   sudo bash .ci/slurm.sh start     # start what is not running, wait until every node is up
#   sudo bash .ci/slurm.sh stop      # cancel its jobs, stop every daemon it started, remove the folder
#   bash .ci/slurm.sh env            # print `export PATH=... SLURM_CONF=...` for this cluster
#
# start and stop are idempotent. Besides the real node, SHARDSCOPE_SLURM_EXTRA_NODES (default 2)
# virtual nodes ${NODE}-v1, ${NODE}-v2 are served by extra slurmd processes on this same host
# (Debian builds Slurm with multiple-slurmd support), so that one job can really span two
# nodes: `srun --nodes 2 --ntasks-per-node 1` runs one task per node, as on a real cluster.
# They weigh more than the real node, so single-node jobs land on the real node first.
#
# Why wrappers: snakemake-executor-plugin-slurm's job step removes every SLURM_* variable but a
# few (SLURM_CONF among the removed) before it runs a rule's shell, whose srun/scontrol would
# then read the machine's /etc/slurm/slurm.conf; PATH survives, and bin/ on it carries the path.
set -euo pipefail

DIR="${SHARDSCOPE_SLURM_DIR:-/run/shardscope-slurm}"
PARTITION="${SHARDSCOPE_SLURM_PARTITION:-debug}"
PORT="${SHARDSCOPE_SLURM_PORT:-6917}"
NODE="$(hostname -s)"
WAIT_S="${SHARDSCOPE_SLURM_WAIT_S:-60}"
EXTRA_NODES="${SHARDSCOPE_SLURM_EXTRA_NODES:-2}"
CONF="$DIR/slurm.conf"
SOCKET="$DIR/run/munge.socket"
TOOLS=(munged munge unmunge slurmctld slurmd sinfo sbatch srun squeue scontrol scancel)
CLIENTS=(srun sbatch squeue scontrol sinfo scancel)
MARKER=.made-by-shardscope-slurm-sh  # stop removes only a folder that start made

log() { echo "slurm.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[[ "$EXTRA_NODES" =~ ^[0-9]$ ]] || die "SHARDSCOPE_SLURM_EXTRA_NODES must be 0-9, not '$EXTRA_NODES'"
[[ "$PORT" =~ ^[0-9]+$ ]] && (( PORT >= 1024 && PORT + EXTRA_NODES + 1 <= 65535 )) || die "SHARDSCOPE_SLURM_PORT must be a port from 1024, not '$PORT'"
[[ "$DIR" == /* && "$DIR" != / ]] || die "SHARDSCOPE_SLURM_DIR must be an absolute folder, not '$DIR'"

need_root() { [[ "$(id -u)" -eq 0 ]] || die "$1 must run as root (it starts daemons)"; }

missing_tools() {
    local tool missing=()
    for tool in "${TOOLS[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
    echo "${missing[*]}"
}

install_packages() {
    need_root install
    [[ -z "$(missing_tools)" ]] && return
    command -v apt-get >/dev/null 2>&1 || die "slurm-wlm/munge are missing and apt-get is not available"
    log "installing slurm-wlm and munge with apt-get"
    # policy-rc.d: Debian would start the packages' own services at install time; nothing here uses them.
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e "$policy" ]]; then printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 0755 "$policy" && created=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
    [[ $created -eq 1 ]] && rm -f "$policy"
    return 0
}

alive() {  # alive PIDFILE: the pid in PIDFILE is a running process
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

all_nodes() {  # the node names this script configures, the real node first
    local i
    echo "$NODE"
    for ((i = 1; i <= EXTRA_NODES; i++)); do echo "${NODE}-v${i}"; done
}

write_wrappers() {  # bin/<client>: the real client with SLURM_CONF pointing at this cluster
    local client real
    install -d -m 0755 "$DIR/bin"
    for client in "${CLIENTS[@]}"; do
        real="$(command -v "$client")"
        [[ "$real" == "$DIR/bin/"* ]] && real="$(PATH="${PATH//$DIR\/bin:/}" command -v "$client")"
        printf '#!/bin/sh\n# Written by .ci/slurm.sh: %s of the private test cluster.\nSLURM_CONF=%s exec %s "$@"\n' \
            "$client" "$CONF" "$real" > "$DIR/bin/$client"
        chmod 0755 "$DIR/bin/$client"
    done
}

start_munge() {  # a munged of our own: own key, socket, pid, log and seed files
    install -d -m 0700 "$DIR/munge"
    install -d -m 0755 "$DIR/run"
    if [[ ! -s "$DIR/munge/munge.key" ]]; then
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
        chmod 0400 "$DIR/munge/munge.key"
    fi
    if alive "$DIR/run/munged.pid" && munge -S "$SOCKET" -n 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1; then
        return
    fi
    log "starting munged (socket $SOCKET)"
    munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
    for _ in $(seq 50); do
        munge -S "$SOCKET" -n 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "munged does not answer; see $DIR/munge/munged.log"
}

config_text() {  # the slurm.conf of this cluster
    local node_line cpus mem extra="" i
    node_line="$(slurmd -C | head -n 1)"
    [[ "$node_line" == NodeName=* ]] || die "slurmd -C did not describe this node: $node_line"
    # slurmd -C prints the node as `hostname`; name it by the short hostname, as sinfo shows it.
    node_line="NodeName=${NODE} ${node_line#NodeName=* }"
    # Virtual nodes: aliases of this machine, with its CPUs and memory (they share them, which
    # is fine for tests that run one job at a time).
    cpus="$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")"
    mem="$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")"
    for ((i = 1; i <= EXTRA_NODES; i++)); do
        extra+="NodeName=${NODE}-v${i} NodeHostname=${NODE} NodeAddr=${NODE} Port=$((PORT + 1 + i)) CPUs=${cpus} RealMemory=${mem} Weight=100 State=UNKNOWN"$'\n'
    done
    cat <<EOF
# Written by .ci/slurm.sh: a private Slurm cluster on this one host for shardscope's tests. Do not edit; rerun it.
ClusterName=shardscope-test
SlurmctldHost=${NODE}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${SOCKET}
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
SlurmctldPort=${PORT}
SlurmdPort=$((PORT + 1))
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool/%n
SlurmctldPidFile=${DIR}/run/slurmctld.pid
SlurmdPidFile=${DIR}/run/slurmd-%n.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd-%n.log
${node_line} Weight=1 State=UNKNOWN
${extra}PartitionName=${PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

update_config() {  # a changed config: stop the daemons first, so none keeps running the old one
    local wanted
    wanted="$(config_text)"
    install -d -m 0755 "$DIR" "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"
    if [[ -f "$CONF" ]] && [[ "$(cat "$CONF")" == "$wanted" ]]; then
        return
    fi
    stop_slurm_daemons
    printf '%s\n' "$wanted" > "$CONF.tmp" && mv "$CONF.tmp" "$CONF"
    log "wrote $CONF"
}

stop_daemon() {  # stop_daemon NAME PIDFILE: stop a daemon this script started, by its pid
    alive "$2" || { rm -f "$2"; return 0; }
    local pid
    pid="$(cat "$2")"
    log "stopping $1 (pid $pid)"
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { rm -f "$2"; return 0; }; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$2"
}

stop_slurm_daemons() {
    local pidfile
    for pidfile in "$DIR"/run/slurmd-*.pid; do  # also those of nodes a new config drops
        [[ -e "$pidfile" ]] && stop_daemon "slurmd $(basename "$pidfile" .pid | sed 's/^slurmd-//')" "$pidfile"
    done
    stop_daemon slurmctld "$DIR/run/slurmctld.pid"
}

start_daemons() {  # whichever of slurmctld and the slurmds is not running
    local node
    if ! alive "$DIR/run/slurmctld.pid"; then
        log "starting slurmctld (port $PORT)"
        slurmctld -f "$CONF"
    fi
    for node in $(all_nodes); do
        if ! alive "$DIR/run/slurmd-$node.pid"; then
            log "starting slurmd for node $node"
            install -d -m 0755 "$DIR/spool/$node"
            slurmd -f "$CONF" -N "$node"
        fi
    done
}

node_up() {  # node_up NODE: the node answers and takes jobs; resumes it if it is down
    local state
    state="$("$DIR/bin/sinfo" -h -N -n "$1" -o %T 2>/dev/null | head -n 1 || true)"
    case "$state" in
        idle|mixed|allocated|completing) return 0 ;;
        down*|drain*) "$DIR/bin/scontrol" update NodeName="$1" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    return 1
}

wait_until_up() {
    local node pending
    for _ in $(seq $((WAIT_S * 2))); do
        pending=""
        for node in $(all_nodes); do node_up "$node" || pending+=" $node"; done
        if [[ -z "$pending" ]]; then
            log "nodes $(all_nodes | paste -sd, -) are up in partition $PARTITION ($CONF)"
            "$DIR/bin/sinfo" -N -o "%N %T %c %m %P" >&2
            return
        fi
        sleep 0.5
    done
    die "node(s)${pending} not up after ${WAIT_S}s; see $DIR/log/slurmctld.log and slurmd-*.log"
}

cancel_jobs() {  # cancel every job of this cluster and wait (up to 30 s) until none is left
    alive "$DIR/run/slurmctld.pid" || return 0
    "$DIR/bin/scancel" --full --partition "$PARTITION" 2>/dev/null || true
    for _ in $(seq 60); do
        [[ -z "$("$DIR/bin/squeue" -h -t RUNNING,COMPLETING,PENDING,CONFIGURING -o %i 2>/dev/null || true)" ]] && return 0
        sleep 0.5
    done
    log "jobs still listed after 30 s: $("$DIR/bin/squeue" -h -o %i 2>/dev/null | paste -sd, -)"
}

start() {
    need_root start
    local missing
    missing="$(missing_tools)"
    [[ -z "$missing" ]] || die "missing $missing: install slurm-wlm and munge (sudo bash .ci/slurm.sh install)"
    if [[ -d "$DIR" && ! -e "$DIR/$MARKER" && -n "$(ls -A "$DIR")" ]]; then
        die "$DIR exists and was not made by this script; set SHARDSCOPE_SLURM_DIR to a new folder"
    fi
    install -d -m 0755 "$DIR"
    touch "$DIR/$MARKER"
    write_wrappers
    start_munge
    update_config
    start_daemons
    wait_until_up
}

stop() {
    need_root stop
    [[ -d "$DIR" ]] || return 0
    [[ -e "$DIR/$MARKER" ]] || die "$DIR was not made by this script; not touching it"
    cancel_jobs
    stop_slurm_daemons
    stop_daemon munged "$DIR/run/munged.pid"
    rm -rf "$DIR"
    log "stopped; removed $DIR"
}

case "${1:-}" in
    install) install_packages ;;
    start) start ;;
    stop) stop ;;
    env) echo "export PATH=$DIR/bin:\$PATH SLURM_CONF=$CONF" ;;
    *) die "usage: bash .ci/slurm.sh install|start|stop|env" ;;
esac
