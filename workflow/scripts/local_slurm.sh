#!/usr/bin/env bash
# Install, start, check and stop a real SLURM cluster on this machine (Debian 12, root, no
# systemd): munged + private MariaDB + slurmdbd + slurmctld + one slurmd per node. With two or more
# nodes each slurmd runs in its own network namespace with its own address and hostname, on a
# private bridge (local_slurm_net.sh); with one node it runs on 127.0.0.1.
#
# Usage: local_slurm.sh {install|start|status|stop|restart|ensure} [--nodes N]
#
#   install  apt-get install the Debian packages that are missing (idempotent)
#   start    write configs into the state dir, start every daemon in the background and wait
#            until the node is idle and sacct answers; does nothing if already running
#   status   exit 0 and print a summary if the cluster is up, non-zero otherwise
#   stop     stop only the daemons this script started (PIDs recorded in the state dir)
#   restart  stop + start
#   ensure   install + start (what CI calls); exits non-zero with a reason when it cannot
#
#   --nodes N  nodes to start (start, restart, ensure) [default TOOLBOX_SLURM_NODES or 2]. Where
#              network namespaces cannot be made (no CAP_NET_ADMIN, no iproute2) a start of N > 1
#              falls back to one node and says why; `status` prints that reason.
#
# Environment:
#   TOOLBOX_SLURM_DIR              state dir (configs, logs, spool, database, pids)
#                                  [default /tmp/toolbox-slurm]
#   TOOLBOX_SLURM_TIMEOUT          seconds to wait for each readiness check [default 60]
#   TOOLBOX_SLURM_CLUSTER          ClusterName [default toolbox]
#   TOOLBOX_SLURM_DB_PORT          TCP port of the private MariaDB on 127.0.0.1 [default 16306]
#   TOOLBOX_SLURM_DEF_MEM_PER_CPU  DefMemPerCPU in MB [default RealMemory / CPUs]
#   TOOLBOX_SLURM_NODES            nodes to start [default 2]
#   TOOLBOX_SLURM_NET              first three octets of the private node network [default 10.213.0]
#
# Exit codes: 0 ok; 1 not running / failed to start; 2 this machine cannot run it
# (not root, no apt-get/dpkg, apt failed); 64 usage error.
set -euo pipefail

STATE_DIR="${TOOLBOX_SLURM_DIR:-/tmp/toolbox-slurm}"
TIMEOUT="${TOOLBOX_SLURM_TIMEOUT:-60}"
CLUSTER="${TOOLBOX_SLURM_CLUSTER:-toolbox}"
DB_PORT="${TOOLBOX_SLURM_DB_PORT:-16306}"
NODES="${TOOLBOX_SLURM_NODES:-2}"
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
# Start order; stop runs it backwards. set_daemons adds one slurmd per node (slurmd@I with I > 1).
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
MUNGE_SOCKET=/run/munge/munge.socket.2
MUNGE_KEY=/etc/munge/munge.key

ETC="$STATE_DIR/etc"
LOG="$STATE_DIR/log"
PIDS="$STATE_DIR/pids"
RUN="$STATE_DIR/run"
SPOOL="$STATE_DIR/spool"
DB_DIR="$STATE_DIR/mysql"
DB_SOCK="$DB_DIR/mysqld.sock"

# shellcheck source=workflow/scripts/local_slurm_net.sh
source "$(dirname "${BASH_SOURCE[0]}")/local_slurm_net.sh"

say() { printf '[local_slurm] %s\n' "$*"; }
warn() { printf '[local_slurm] WARNING: %s\n' "$*" >&2; }
die() {
    local code=$1
    shift
    printf '[local_slurm] ERROR: %s\n' "$*" >&2
    exit "$code"
}

# ---------------------------------------------------------------------------- process helpers

# alive PID COMM: the process exists, is not a zombie/dead, and its comm is COMM.
# (Stopped daemons linger as zombies here because PID 1 reaps slowly: kill -0 is not enough.)
alive() {
    local pid=$1 comm=$2 name
    running "$pid" || return 1
    { read -r name <"/proc/$pid/comm"; } 2>/dev/null || return 1
    [[ "$name" == "$comm" ]]
}

# running PID: the process exists and is not a zombie (whatever its comm).
running() {
    local stat state
    [[ "$1" =~ ^[0-9]+$ ]] || return 1
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    state=${stat##*) }
    state=${state%% *}
    [[ "$state" != Z && "$state" != X && "$state" != x ]]
}

recorded_pid() { cat "$PIDS/$1.pid" 2>/dev/null || true; }

# A daemon's process name: slurmd@2 (node 2's slurmd) is a slurmd.
comm_of() { echo "${1%@*}"; }

daemon_alive() { alive "$(recorded_pid "$1")" "$(comm_of "$1")"; }

# set_daemons N: the daemons of an N-node cluster (slurmd, slurmd@2, ..., slurmd@N).
set_daemons() {
    local i
    DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
    for ((i = 2; i <= $1; i++)); do DAEMONS+=("slurmd@$i"); done
}

# The node count of the running (or last started) cluster.
started_nodes() {
    local n
    n=$(cat "$STATE_DIR/nodes" 2>/dev/null || echo 1)
    [[ "$n" =~ ^[0-9]+$ ]] && echo "$n" || echo 1
}

# The daemon name of node I's slurmd (node 1: slurmd, as in a one-node cluster).
slurmd_daemon() { (($1 == 1)) && echo slurmd || echo "slurmd@$1"; }

# Live processes named COMM that this script did not start.
foreign_pids() {
    local comm=$1 mine pid out=()
    mine=" $(cat "$PIDS/$comm.pid" "$PIDS/$comm"@*.pid 2>/dev/null | tr '\n' ' ') "
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        [[ "$mine" == *" $pid "* ]] && continue
        alive "$pid" "$comm" && out+=("$pid")
    done
    echo "${out[*]:-}"
}

# launch NAME CMD...: start CMD detached in its own session, record its PID.
# CMD must exec into the daemon in the foreground so that $! is the daemon's PID.
launch() {
    local name=$1
    shift
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 &
    echo $! >"$PIDS/$name.pid"
}

# wait_for DESC LOGFILE DAEMONS CMD...: poll CMD until it succeeds; fail fast when one of the
# space-separated DAEMONS dies; on timeout print the log tail and exit 1.
wait_for() {
    local desc=$1 logfile=$2 daemons=$3 deadline d
    shift 3
    deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        for d in $daemons; do daemon_alive "$d" || check_started "$d" "$LOG/$d.log"; done
        if ((SECONDS >= deadline)); then
            printf '[local_slurm] ERROR: timed out after %ss waiting for %s\n' "$TIMEOUT" "$desc" >&2
            if [[ -n "$logfile" && -e "$logfile" ]]; then
                printf '[local_slurm] last lines of %s:\n' "$logfile" >&2
                tail -n 25 "$logfile" | sed 's/^/    /' >&2
            fi
            exit 1
        fi
        sleep 0.3
    done
}

# Checks a daemon is still alive while waiting for it (fails fast when it died at startup).
# Right after launch the PID may still be setsid/setpriv on its way to exec the daemon.
check_started() {
    local name=$1 logfile=$2 pid deadline comm
    pid=$(recorded_pid "$name")
    comm=$(comm_of "$name")
    deadline=$((SECONDS + 5))
    while ! alive "$pid" "$comm" && running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    if ! alive "$pid" "$comm"; then
        printf '[local_slurm] ERROR: %s exited right after start\n' "$name" >&2
        [[ -s "$logfile" ]] || logfile="$LOG/$name.out"
        if [[ -s "$logfile" ]]; then
            printf '[local_slurm] last lines of %s:\n' "$logfile" >&2
            tail -n 20 "$logfile" | sed 's/^/    /' >&2
        fi
        exit 1
    fi
}

# ------------------------------------------------------------------------------------ install

require_root() {
    [[ "$(id -u)" == 0 ]] || die 2 "must run as root (uid $(id -u)): it installs packages and starts system daemons"
}

missing_packages() {
    local p out=()
    for p in "${PACKAGES[@]}"; do
        if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
            out+=("$p")
        fi
    done
    echo "${out[*]:-}"
}

cmd_install() {
    require_root
    command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
        die 2 "no dpkg/apt-get: this script supports Debian/Ubuntu only"
    local missing
    missing=$(missing_packages)
    if [[ -z "$missing" ]]; then
        say "packages present: ${PACKAGES[*]}"
        return 0
    fi
    say "installing: $missing"
    local t0=$SECONDS apt_log="/tmp/local_slurm-apt.$$.log"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get update -qq >"$apt_log" 2>&1; then
        tail -n 15 "$apt_log" | sed 's/^/    /' >&2
        die 2 "apt-get update failed (no package mirror reachable?); log: $apt_log"
    fi
    # shellcheck disable=SC2086
    if ! apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        $missing >>"$apt_log" 2>&1; then
        tail -n 15 "$apt_log" | sed 's/^/    /' >&2
        die 2 "apt-get install failed; log: $apt_log"
    fi
    missing=$(missing_packages)
    [[ -z "$missing" ]] || die 2 "still missing after apt-get install: $missing (log: $apt_log)"
    rm -f "$apt_log"
    say "installed in $((SECONDS - t0))s"
}

# -------------------------------------------------------------------------------------- start

require_installed() {
    local missing
    missing=$(missing_packages)
    [[ -z "$missing" ]] || die 2 "packages missing: $missing (run: $0 install)"
}

mem_total_mb() { awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo; }

# write_configs N: slurm.conf for N nodes. One node: this host on 127.0.0.1. N > 1: every node has
# this machine's CPUs (they share them) and RealMemory / N, its own address and a slurmd whose spool,
# log and pid file carry its name (%n).
write_configs() {
    local nodes=$1 host node_line cpus real_mem def_mem db_pass ctld_addr slurmd_files i hw
    host=$(hostname -s)
    # e.g. NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105
    node_line=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') || die 1 "'slurmd -C' printed no NodeName line"
    cpus=$(sed -n 's/.* CPUs=\([0-9]\+\).*/\1/p' <<<"$node_line")
    [[ -n "$cpus" ]] || die 1 "cannot parse CPUs from: $node_line"
    real_mem=$(($(mem_total_mb) * 9 / 10 / nodes))
    def_mem="${TOOLBOX_SLURM_DEF_MEM_PER_CPU:-$((real_mem / cpus))}"
    if ((nodes == 1)); then
        ctld_addr=127.0.0.1
        node_line=$(sed -E "s/ RealMemory=[0-9]+//; s/^NodeName=([^ ]+)/NodeName=\1 NodeAddr=127.0.0.1/" <<<"$node_line")
        node_line="$node_line RealMemory=$real_mem State=UNKNOWN"
        slurmd_files="SlurmdSpoolDir=$SPOOL/slurmd
SlurmdPidFile=$RUN/slurmd.pid
SlurmdLogFile=$LOG/slurmd.log"
    else
        ctld_addr=$(controller_addr)
        hw=$(sed -E 's/^NodeName=[^ ]+ //; s/ RealMemory=[0-9]+//; s/ UpTime=.*//' <<<"$node_line")
        node_line=""
        for ((i = 1; i <= nodes; i++)); do
            node_line+="NodeName=$(node_name "$i") NodeHostname=$(node_name "$i") NodeAddr=$(node_addr "$i")"
            node_line+=" $hw RealMemory=$real_mem State=UNKNOWN"$'\n'
        done
        node_line=${node_line%$'\n'}
        slurmd_files="SlurmdSpoolDir=$SPOOL/slurmd-%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOG/slurmd-%n.log"
    fi

    if [[ ! -s "$ETC/db_password" ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db_password")
    fi
    db_pass=$(cat "$ETC/db_password")

    cat >"$ETC/slurm.conf" <<EOF
# Written by workflow/scripts/local_slurm.sh -- regenerated on every start.
ClusterName=$CLUSTER
SlurmctldHost=$host($ctld_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$def_mem
ReturnToService=2
MinJobAge=300
KillWait=5
InactiveLimit=0
StateSaveLocation=$SPOOL/slurmctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOG/slurmctld.log
$slurmd_files
SlurmctldDebug=info
SlurmdDebug=info
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
MailProg=/bin/true
$node_line
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
# Written by workflow/scripts/local_slurm.sh -- regenerated on every start.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$db_pass
StorageLoc=slurm_acct_db
EOF
    )
    chmod 600 "$ETC/slurmdbd.conf"

    # Clients (sinfo, sbatch, sacct, ...) read /etc/slurm/: link our files there.
    mkdir -p /etc/slurm
    local f
    for f in slurm.conf slurmdbd.conf; do
        if [[ -e "/etc/slurm/$f" && ! -L "/etc/slurm/$f" ]]; then
            mv "/etc/slurm/$f" "/etc/slurm/$f.bak-local_slurm"
            warn "moved existing /etc/slurm/$f to /etc/slurm/$f.bak-local_slurm"
        fi
        ln -sfn "$ETC/$f" "/etc/slurm/$f"
    done
    say "configs in $ETC ($nodes node(s): ${node_line%% State=*}, DefMemPerCPU=$def_mem)"
}

munge_works() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }

start_munged() {
    if [[ ! -s "$MUNGE_KEY" ]]; then
        say "creating munge key $MUNGE_KEY"
        runuser -u munge -- mungekey --create --keyfile="$MUNGE_KEY"
    fi
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    local other
    other=$(foreign_pids munged)
    if [[ -n "$other" ]]; then
        die 1 "a munged this script did not start is running (pid $other); stop it first" \
            "(it would hold $MUNGE_SOCKET)"
    fi
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    # setpriv execs (runuser would fork and stay the parent), so the recorded PID is munged's.
    launch munged setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground --socket="$MUNGE_SOCKET"
    check_started munged "$LOG/munged.out"
    wait_for "munged on $MUNGE_SOCKET" "$LOG/munged.out" munged munge_works
    say "munged up (pid $(recorded_pid munged))"
}

db_sql() { mariadb --no-defaults --protocol=socket -S "$DB_SOCK" -u root "$@"; }

start_mariadb() {
    mkdir -p "$DB_DIR"
    if [[ ! -d "$DB_DIR/data/mysql" ]]; then
        say "initialising MariaDB datadir $DB_DIR/data"
        rm -rf "$DB_DIR/data"
        mariadb-install-db --no-defaults --user=root --datadir="$DB_DIR/data" \
            --auth-root-authentication-method=socket --skip-test-db >"$LOG/mariadb-install.log" 2>&1 ||
            {
                tail -n 20 "$LOG/mariadb-install.log" | sed 's/^/    /' >&2
                die 1 "mariadb-install-db failed"
            }
    fi
    launch mariadbd mariadbd --no-defaults --user=root --datadir="$DB_DIR/data" \
        --socket="$DB_SOCK" --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
        --pid-file="$RUN/mariadbd.pid" --log-error="$LOG/mariadbd.log" \
        --innodb-buffer-pool-size=256M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
        --max-connections=100
    check_started mariadbd "$LOG/mariadbd.log"
    wait_for "MariaDB on $DB_SOCK" "$LOG/mariadbd.log" mariadbd db_sql -e 'SELECT 1'
    local pw
    pw=$(cat "$ETC/db_password")
    db_sql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pw';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pw';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
        FLUSH PRIVILEGES;"
    say "MariaDB up on 127.0.0.1:$DB_PORT (pid $(recorded_pid mariadbd))"
}

# port_listening PORT: something listens on TCP PORT (from /proc/net, so iproute2 is not needed).
port_listening() {
    local hex
    hex=$(printf ':%04X' "$1")
    awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {found = 1} END {exit !found}' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Fail early, with the culprit, when a port the cluster needs is taken.
check_ports_free() {
    local port who
    for port in "$DB_PORT" 6817 6818 6819; do
        if port_listening "$port"; then
            who=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -o 'users:.*' | head -n1 || true)
            die 1 "TCP port $port is already in use ${who:+($who)}; stop that process or set TOOLBOX_SLURM_DB_PORT"
        fi
    done
}

# nodes_idle N: sinfo lists N nodes in partition debug, every one of them up.
nodes_idle() {
    local st line n=0
    st=$(timeout 5 sinfo -h -N -p debug -o '%T' 2>/dev/null) || return 1
    while read -r line; do
        [[ "$line" == idle || "$line" == mixed || "$line" == allocated ]] || return 1
        n=$((n + 1))
    done <<<"$st"
    ((n == $1))
}

sacct_answers() { timeout 15 sacct -n -X -S now-1hour >/dev/null 2>&1; }

start_slurm() {
    local nodes=$1 d other i name slurmds=""
    for d in "${DAEMONS[@]}"; do [[ "$d" == slurmd* ]] && slurmds+=" $d"; done
    for d in slurmdbd slurmctld slurmd; do
        other=$(foreign_pids "$d")
        [[ -z "$other" ]] || die 1 "a $d this script did not start is running (pid $other); stop it first"
    done
    mkdir -p "$SPOOL/slurmctld" "$SPOOL/slurmd"

    # slurmdbd has no -f: it reads /etc/slurm/slurmdbd.conf (our symlink).
    launch slurmdbd slurmdbd -D
    wait_for "slurmdbd on 127.0.0.1:6819" "$LOG/slurmdbd.log" slurmdbd port_listening 6819
    say "slurmdbd up (pid $(recorded_pid slurmdbd))"

    launch slurmctld slurmctld -D -f "$ETC/slurm.conf"
    if ((nodes == 1)); then
        launch slurmd slurmd -D -f "$ETC/slurm.conf"
    else
        # node I's slurmd: in its network namespace, in a UTS namespace named after the node
        for ((i = 1; i <= nodes; i++)); do
            name=$(node_name "$i")
            # nsenter, not 'ip netns exec': that remounts /sys and hides /sys/fs/cgroup from slurmd
            mkdir -p "$SPOOL/slurmd-$name"
            launch "$(slurmd_daemon "$i")" nsenter --net="/run/netns/$(node_ns "$i")" unshare --uts \
                sh -c "hostname $name && exec slurmd -D -f $ETC/slurm.conf -N $name"
        done
    fi
    wait_for "$nodes node(s) to be idle in sinfo" "$LOG/slurmctld.log" "slurmctld$slurmds" nodes_idle "$nodes"
    say "slurmctld (pid $(recorded_pid slurmctld)) and $nodes slurmd up, nodes idle"
    wait_for "sacct to answer (slurmdbd accounting)" "$LOG/slurmdbd.log" "slurmdbd slurmctld" sacct_answers
    say "sacct answers"
}

all_alive() {
    local d
    for d in "${DAEMONS[@]}"; do daemon_alive "$d" || return 1; done
}

any_alive() {
    local d
    for d in "${DAEMONS[@]}"; do daemon_alive "$d" && return 0; done
    return 1
}

start_failed() {
    if (($1 != 0)); then
        printf '[local_slurm] start failed; daemons started so far are left running for inspection' >&2
        printf ' (logs in %s); stop them with: %s stop\n' "$LOG" "$0" >&2
    fi
}

cmd_start() {
    require_root
    require_installed
    local want=$NODES have reason=""
    [[ "$want" =~ ^[1-9][0-9]*$ && "$want" -le 200 ]] || die 64 "--nodes must be a number in 1..200, got '$want'"
    have=$(started_nodes)
    set_daemons "$have"
    if all_alive; then
        if ((have == want)) || { ((have == 1)) && [[ -s "$STATE_DIR/fallback_reason" ]]; }; then
            say "already running with $have node(s) (state dir $STATE_DIR); nothing to do"
            return 0
        fi
        say "running with $have node(s), $want asked for: restarting"
    elif any_alive; then
        say "partially running: stopping the remaining daemons first"
    fi
    any_alive && cmd_stop
    mkdir -p "$ETC" "$LOG" "$PIDS" "$RUN" "$SPOOL"
    chmod 755 "$STATE_DIR"
    rm -f "$STATE_DIR/fallback_reason"
    if ((want > 1)) && ! reason=$(net_possible); then
        warn "network namespaces are not possible here: $reason; starting ONE node instead of $want"
        echo "$want nodes asked for, 1 started: $reason" >"$STATE_DIR/fallback_reason"
        want=1
    fi
    set_daemons "$want"
    check_ports_free
    local t0=$SECONDS
    say "starting a $want-node SLURM cluster (state dir $STATE_DIR)"
    trap 'start_failed $?' EXIT
    echo "$want" >"$STATE_DIR/nodes"
    if ((want > 1)); then net_up; fi
    write_configs "$want"
    start_munged
    start_mariadb
    start_slurm "$want"
    trap - EXIT
    say "cluster up in $((SECONDS - t0))s: partition debug, $(sinfo -h -o '%D node(s), %c CPUs, %m MB' -p debug)"
}

# --------------------------------------------------------------------------------------- stop

# stop_daemon NAME: SIGTERM the recorded PID, wait (zombie = gone), SIGKILL after a grace period.
stop_daemon() {
    local name=$1 pid deadline comm
    pid=$(recorded_pid "$name")
    comm=$(comm_of "$name")
    if [[ -z "$pid" ]]; then
        return 0
    fi
    if alive "$pid" "$comm"; then
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 20))
        while alive "$pid" "$comm" && ((SECONDS < deadline)); do sleep 0.2; done
        if alive "$pid" "$comm"; then
            warn "$name (pid $pid) ignored SIGTERM for 20s: sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 5))
            while alive "$pid" "$comm" && ((SECONDS < deadline)); do sleep 0.2; done
        fi
        if alive "$pid" "$comm"; then
            warn "$name (pid $pid) still alive"
            return 1
        fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$PIDS/$name.pid"
}

cmd_stop() {
    local i rc=0
    if [[ ! -d "$PIDS" ]] || [[ -z "$(ls -A "$PIDS" 2>/dev/null)" ]]; then
        net_down
        say "not running (no recorded PIDs in $PIDS)"
        return 0
    fi
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[$i]}" || rc=1
    done
    # Wipe pid files that name no daemon of ours (stale), but keep those still alive (rc=1).
    ((rc == 0)) && rm -f "$PIDS"/*.pid
    ((rc == 0)) && net_down
    ((rc == 0)) && say "stopped" || warn "some daemons could not be stopped"
    return "$rc"
}

# ------------------------------------------------------------------------------------- status

cmd_status() {
    local d up=0 down=()
    for d in "${DAEMONS[@]}"; do
        if daemon_alive "$d"; then up=$((up + 1)); else down+=("$d"); fi
    done
    if ((up == 0)); then
        echo "local SLURM cluster: not running (state dir $STATE_DIR)"
        return 1
    fi
    if ((${#down[@]} > 0)); then
        echo "local SLURM cluster: partially running; down: ${down[*]} (state dir $STATE_DIR)"
        return 1
    fi
    local nodes
    if ! nodes=$(timeout 15 sinfo -h -N -o '%N %P %T %c CPUs %m MB' 2>&1); then
        echo "local SLURM cluster: daemons alive but sinfo fails: $nodes"
        return 1
    fi
    if ! sacct_answers; then
        echo "local SLURM cluster: daemons alive but sacct does not answer"
        return 1
    fi
    echo "local SLURM cluster: up, $(started_nodes) node(s) (state dir $STATE_DIR)"
    if [[ -s "$STATE_DIR/fallback_reason" ]]; then echo "  fallback: $(cat "$STATE_DIR/fallback_reason")"; fi
    for d in "${DAEMONS[@]}"; do printf '  %-9s pid %s\n' "$d" "$(recorded_pid "$d")"; done
    echo "  nodes:"
    sed 's/^/    /' <<<"$nodes"
    echo "  jobs in queue: $(timeout 15 squeue -h | wc -l)"
}

# -------------------------------------------------------------------------------------- main

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

main() {
    local cmd=${1:-}
    shift || true
    while (($#)); do
        case "$1" in
            --nodes) NODES=${2:-}; shift 2 || die 64 "--nodes needs a number" ;;
            --nodes=*) NODES=${1#--nodes=}; shift ;;
            *) die 64 "unknown option '$1' (usage: $0 {install|start|status|stop|restart|ensure} [--nodes N])" ;;
        esac
    done
    set_daemons "$(started_nodes)"
    case "$cmd" in
        install) cmd_install ;;
        start) cmd_start ;;
        status) cmd_status ;;
        stop) cmd_stop ;;
        restart) cmd_stop && cmd_start ;;
        ensure)
            cmd_install
            cmd_start
            ;;
        -h | --help | help) usage ;;
        *)
            usage >&2
            exit 64
            ;;
    esac
}

main "$@"
