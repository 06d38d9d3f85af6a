#!/usr/bin/env bash
# A real single-node Slurm on 127.0.0.1, for `pytest -m slurm` and for trying
# `deltalens reproduce --executor slurm` without a cluster. Idempotent: a second call finds the
# daemons running and only checks that the node is up.
#
#   bash scripts/slurm_local.sh          install (apt-get: slurm-wlm, munge, slurmdbd, mariadb) and start
#   bash scripts/slurm_local.sh stop     stop the daemons it started (by their pid files)
#   bash scripts/slurm_local.sh status   sinfo, or why the cluster is not up
#
# The cluster: slurmctld + slurmd on this host (2 CPUs, no GPUs), partition `local` (the default),
# requeue allowed, accounting through slurmdbd on a local MariaDB (so sacct works, as on a real
# cluster). Containers rarely give cgroups to a daemon, so processes are tracked by
# proctrack/linuxproc and tasks are not confined (task/none). Must run as root.
set -euo pipefail
ROOT=/var/lib/deltalens-slurm          # everything the cluster writes lives here
CONF=/etc/slurm
CLUSTER=deltalens-local
NODE=$(hostname -s)
PIDS=$ROOT/pids
DB_SOCKET=/run/mysqld/mysqld.sock

die() { echo "[slurm_local] error: $*" >&2; exit 1; }
note() { echo "[slurm_local] $*" >&2; }

alive() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

stop() {
    for daemon in slurmd slurmctld slurmdbd mariadb munged; do
        if alive "$daemon"; then
            note "stopping $daemon (pid $(cat "$PIDS/$daemon.pid"))"
            kill "$(cat "$PIDS/$daemon.pid")" || true
            for _ in $(seq 50); do alive "$daemon" || break; sleep 0.2; done
        fi
        rm -f "$PIDS/$daemon.pid"
    done
}

case "${1:-start}" in
    stop) stop; exit 0 ;;
    status) sinfo 2>&1 || true; exit 0 ;;
    start) ;;
    *) die "unknown command ${1}; use start (default), stop or status" ;;
esac

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts the Slurm daemons)"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
    note "installing slurm-wlm, munge, slurmdbd and mariadb-server (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends slurm-wlm munge slurmdbd mariadb-server >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
                 slurm-wlm munge slurmdbd mariadb-server >/dev/null; } \
        || die "apt-get could not install slurm-wlm, munge, slurmdbd and mariadb-server"
fi

mkdir -p "$ROOT"/{state,spool,log} "$PIDS" "$CONF" /run/munge /run/mysqld
chown munge:munge /run/munge && chmod 0755 /run/munge
chown mysql:mysql /run/mysqld

# munge: one key shared by every daemon and client (the package made one; make one if not)
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
if ! alive munged; then
    runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$PIDS/munged.pid"
fi
munge -n | unmunge >/dev/null || die "munge does not authenticate (see /var/log/munge/munged.log)"

# MariaDB for slurmdbd (sacct), listening on its socket only
if ! alive mariadb; then
    if [ ! -d /var/lib/mysql/mysql ]; then
        note "initialising MariaDB in /var/lib/mysql"
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    fi
    runuser -u mysql -- /usr/sbin/mariadbd --datadir=/var/lib/mysql --socket=$DB_SOCKET --skip-networking \
        --pid-file=/run/mysqld/mariadb.pid >"$ROOT/log/mariadb.log" 2>&1 &
    for _ in $(seq 100); do [ -S $DB_SOCKET ] && break; sleep 0.2; done
    [ -S $DB_SOCKET ] || die "MariaDB did not start (see $ROOT/log/mariadb.log)"
    cp /run/mysqld/mariadb.pid "$PIDS/mariadb.pid"
fi
mariadb --socket=$DB_SOCKET -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'deltalens-local';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" \
    || die "could not create the accounting database"

cat >"$CONF/slurmdbd.conf" <<EOF
# written by deltalens scripts/slurm_local.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$ROOT/log/slurmdbd.log
PidFile=$PIDS/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=deltalens-local
StorageLoc=slurm_acct_db
EOF
chmod 0600 "$CONF/slurmdbd.conf"

cpus=2
memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))  # MB offered to jobs: half of it
cat >"$ROOT/slurm.conf.new" <<EOF
# written by deltalens scripts/slurm_local.sh: one node on 127.0.0.1
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# a requeued job may start again after cred_expire seconds (Slurm's default 120: two idle minutes a test)
AuthInfo=cred_expire=10
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
# no cgroups in a container: track processes through /proc, do not confine tasks
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# look at the queue every few seconds (defaults 60 and 30): a requeued job starts as soon as it may
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# a preempted or timed-out job may go back to the queue (submitit's checkpointing requeues itself)
JobRequeue=1
MinJobAge=600
KillWait=10
# sacct through slurmdbd
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
if ! cmp -s "$ROOT/slurm.conf.new" "$CONF/slurm.conf"; then
    mv "$ROOT/slurm.conf.new" "$CONF/slurm.conf"
    for daemon in slurmd slurmctld; do  # a changed config: the running daemons start again with it
        if alive "$daemon"; then
            note "slurm.conf changed: restarting $daemon"
            kill "$(cat "$PIDS/$daemon.pid")" || true
            for _ in $(seq 50); do alive "$daemon" || break; sleep 0.2; done
        fi
    done
else
    rm -f "$ROOT/slurm.conf.new"
fi
rm -f "$CONF/cgroup.conf"  # none: no cgroup plugin is asked for

if ! alive slurmdbd; then
    /usr/sbin/slurmdbd
    for _ in $(seq 50); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
fi
sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qw "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "slurmdbd is not answering (see $ROOT/log/slurmdbd.log)"
if ! alive slurmctld; then
    /usr/sbin/slurmctld
fi
if ! alive slurmd; then
    /usr/sbin/slurmd -N "$NODE"
fi
for _ in $(seq 100); do
    state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
    case "$state" in idle*|mix*|alloc*) break ;; esac
    sleep 0.3
done
case "${state:-}" in
    idle*|mix*|alloc*) ;;
    *) die "node $NODE is '${state:-unknown}', not up (see $ROOT/log/slurmctld.log and slurmd.log)" ;;
esac
note "cluster $CLUSTER up: node $NODE ($cpus CPUs, $memory MB), partition local; logs in $ROOT/log"
sinfo
