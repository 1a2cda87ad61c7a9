#!/usr/bin/env bash
# Install, start, check and stop a real single-node SLURM cluster on this machine
# (Debian 12, root, no systemd): munged + private MariaDB + slurmdbd + slurmctld + slurmd.
#
# Usage: local_slurm.sh {install|start|status|stop|restart|ensure}
#
#   install  apt-get install the Debian packages that are missing (idempotent)
#   start    write configs into the state dir, start every daemon in the background and wait
#            until the node is idle and sacct answers; does nothing if already running
#   status   exit 0 and print a summary if the cluster is up, non-zero otherwise
#   stop     stop only the daemons this script started (PIDs recorded in the state dir)
#   restart  stop + start
#   ensure   install + start (what CI calls); exits non-zero with a reason when it cannot
#
# Environment:
#   TOOLBOX_SLURM_DIR              state dir (configs, logs, spool, database, pids)
#                                  [default /tmp/toolbox-slurm]
#   TOOLBOX_SLURM_TIMEOUT          seconds to wait for each readiness check [default 60]
#   TOOLBOX_SLURM_CLUSTER          ClusterName [default toolbox]
#   TOOLBOX_SLURM_DB_PORT          TCP port of the private MariaDB on 127.0.0.1 [default 16306]
#   TOOLBOX_SLURM_DEF_MEM_PER_CPU  DefMemPerCPU in MB [default RealMemory / CPUs]
#
# Exit codes: 0 ok; 1 not running / failed to start; 2 this machine cannot run it
# (not root, no apt-get/dpkg, apt failed); 64 usage error.
set -euo pipefail

STATE_DIR="${TOOLBOX_SLURM_DIR:-/tmp/toolbox-slurm}"
TIMEOUT="${TOOLBOX_SLURM_TIMEOUT:-60}"
CLUSTER="${TOOLBOX_SLURM_CLUSTER:-toolbox}"
DB_PORT="${TOOLBOX_SLURM_DB_PORT:-16306}"
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
# Start order; stop runs it backwards.
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

daemon_alive() { alive "$(recorded_pid "$1")" "$1"; }

# Live processes named COMM that this script did not start.
foreign_pids() {
    local comm=$1 mine pid out=()
    mine=$(recorded_pid "$comm")
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        [[ "$pid" == "$mine" ]] && continue
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
        for d in $daemons; do alive "$(recorded_pid "$d")" "$d" || check_started "$d" "$LOG/$d.log"; done
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
    local name=$1 logfile=$2 pid deadline
    pid=$(recorded_pid "$name")
    deadline=$((SECONDS + 5))
    while ! alive "$pid" "$name" && running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    if ! alive "$pid" "$name"; then
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

write_configs() {
    local host node_line cpus real_mem def_mem db_pass
    host=$(hostname -s)
    # e.g. NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105
    node_line=$(slurmd -C 2>/dev/null | grep -m1 '^NodeName=') || die 1 "'slurmd -C' printed no NodeName line"
    cpus=$(sed -n 's/.* CPUs=\([0-9]\+\).*/\1/p' <<<"$node_line")
    [[ -n "$cpus" ]] || die 1 "cannot parse CPUs from: $node_line"
    real_mem=$(($(mem_total_mb) * 9 / 10))
    def_mem="${TOOLBOX_SLURM_DEF_MEM_PER_CPU:-$((real_mem / cpus))}"
    node_line=$(sed -E "s/ RealMemory=[0-9]+//; s/^NodeName=([^ ]+)/NodeName=\1 NodeAddr=127.0.0.1/" <<<"$node_line")
    node_line="$node_line RealMemory=$real_mem State=UNKNOWN"

    if [[ ! -s "$ETC/db_password" ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db_password")
    fi
    db_pass=$(cat "$ETC/db_password")

    cat >"$ETC/slurm.conf" <<EOF
# Written by workflow/scripts/local_slurm.sh -- regenerated on every start.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
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
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
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
    say "configs in $ETC (node: ${node_line%% State=*}, DefMemPerCPU=$def_mem)"
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

node_idle() {
    local st
    st=$(timeout 5 sinfo -h -N -p debug -o '%T' 2>/dev/null) || return 1
    [[ "$st" == idle || "$st" == mixed || "$st" == allocated ]]
}

sacct_answers() { timeout 15 sacct -n -X -S now-1hour >/dev/null 2>&1; }

start_slurm() {
    local d other
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
    launch slurmd slurmd -D -f "$ETC/slurm.conf"
    wait_for "node to be idle in sinfo" "$LOG/slurmctld.log" "slurmctld slurmd" node_idle
    say "slurmctld (pid $(recorded_pid slurmctld)) and slurmd (pid $(recorded_pid slurmd)) up, node idle"
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
    if all_alive; then
        say "already running (state dir $STATE_DIR); nothing to do"
        return 0
    fi
    if any_alive; then
        say "partially running: stopping the remaining daemons first"
        cmd_stop
    fi
    check_ports_free
    local t0=$SECONDS
    say "starting single-node SLURM cluster (state dir $STATE_DIR)"
    trap 'start_failed $?' EXIT
    mkdir -p "$ETC" "$LOG" "$PIDS" "$RUN" "$SPOOL"
    chmod 755 "$STATE_DIR"
    write_configs
    start_munged
    start_mariadb
    start_slurm
    trap - EXIT
    say "cluster up in $((SECONDS - t0))s: partition debug, $(sinfo -h -o '%D node(s), %c CPUs, %m MB' -p debug)"
}

# --------------------------------------------------------------------------------------- stop

# stop_daemon NAME: SIGTERM the recorded PID, wait (zombie = gone), SIGKILL after a grace period.
stop_daemon() {
    local name=$1 pid deadline
    pid=$(recorded_pid "$name")
    if [[ -z "$pid" ]]; then
        return 0
    fi
    if alive "$pid" "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 20))
        while alive "$pid" "$name" && ((SECONDS < deadline)); do sleep 0.2; done
        if alive "$pid" "$name"; then
            warn "$name (pid $pid) ignored SIGTERM for 20s: sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 5))
            while alive "$pid" "$name" && ((SECONDS < deadline)); do sleep 0.2; done
        fi
        if alive "$pid" "$name"; then
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
        say "not running (no recorded PIDs in $PIDS)"
        return 0
    fi
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[$i]}" || rc=1
    done
    # Wipe pid files that name no daemon of ours (stale), but keep those still alive (rc=1).
    ((rc == 0)) && rm -f "$PIDS"/*.pid
    ((rc == 0)) && say "stopped" || warn "some daemons could not be stopped"
    return "$rc"
}

# ------------------------------------------------------------------------------------- status

cmd_status() {
    local d pid up=0 down=()
    for d in "${DAEMONS[@]}"; do
        pid=$(recorded_pid "$d")
        if alive "$pid" "$d"; then up=$((up + 1)); else down+=("$d"); fi
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
    echo "local SLURM cluster: up (state dir $STATE_DIR)"
    for d in "${DAEMONS[@]}"; do printf '  %-9s pid %s\n' "$d" "$(recorded_pid "$d")"; done
    echo "  node: $nodes"
    echo "  jobs in queue: $(timeout 15 squeue -h | wc -l)"
}

# -------------------------------------------------------------------------------------- main

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

main() {
    local cmd=${1:-}
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
