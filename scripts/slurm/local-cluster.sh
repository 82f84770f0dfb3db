#!/usr/bin/env bash
# A one-node Slurm cluster on loopback, for trying the recipe in this folder and for its test
# (tests/test-slurm.cpp): munged, slurmctld and slurmd (Debian's munge, slurmctld, slurmd), each
# with its socket, state, spool, logs and configuration under DIR, on free ports; nothing outside
# DIR is read or written, so two checkouts can each run one at the same time.
#
#   local-cluster.sh start DIR   starts the daemons, waits until the node is idle, and prints the
#                                line to source: export SLURM_CONF=DIR/slurm.conf
#   local-cluster.sh stop DIR    stops them (scontrol shutdown, then munged), killing what is left
#
# Runs as root (slurmd starts jobs as their submitting user). Exit status 2: the daemons cannot
# start here (missing programs, not root); the reason is on stderr.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 64; }
[ $# -eq 2 ] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)

cannot() { echo "local-cluster: cannot start a Slurm cluster here: $*" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stop() {
  if [ -f "$dir/slurm.conf" ]; then
    SLURM_CONF="$dir/slurm.conf" timeout 10 scontrol shutdown >/dev/null 2>&1 || true
  fi
  for pidfile in slurmd.pid slurmctld.pid; do
    for _ in $(seq 50); do
      [ -s "$dir/$pidfile" ] && kill -0 "$(cat "$dir/$pidfile")" 2>/dev/null || break
      sleep 0.1
    done
    [ -s "$dir/$pidfile" ] && kill -9 "$(cat "$dir/$pidfile")" 2>/dev/null || true
  done
  if [ -S "$dir/munge.socket" ]; then
    munged --stop --socket="$dir/munge.socket" >/dev/null 2>&1 || true
  fi
  [ -s "$dir/munged.pid" ] && kill -9 "$(cat "$dir/munged.pid")" 2>/dev/null || true
  rm -f "$dir"/*.pid
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) usage ;;
esac

for prog in munged munge slurmctld slurmd sbatch squeue scontrol python3; do
  command -v "$prog" >/dev/null 2>&1 || cannot "$prog is not installed (make setup installs munge, slurmctld, slurmd and slurm-client)"
done
[ "$(id -u)" -eq 0 ] || cannot "slurmd must run as root (this is uid $(id -u))"

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
# munge: a key of our own, its socket in DIR.
head -c 1024 /dev/urandom > "$dir/munge.key"
chmod 400 "$dir/munge.key"
munged --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
  --seed-file="$dir/munged.seed" --log-file="$dir/log/munged.log" || cannot "munged failed (see $dir/log/munged.log)"

host=$(hostname -s)
cpus=$(nproc)
cat > "$dir/slurm.conf" <<CONF
# Written by scripts/slurm/local-cluster.sh: one node, loopback only, no accounting.
ClusterName=ragkv
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=600
KillWait=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ragkv Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i >"$dir/log/slurmctld.start" 2>&1 || { stop; cannot "slurmctld failed (see $dir/log/slurmctld.log)"; }
slurmd >"$dir/log/slurmd.start" 2>&1 || { stop; cannot "slurmd failed (see $dir/log/slurmd.log)"; }
for _ in $(seq 100); do
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && { echo "export SLURM_CONF=$dir/slurm.conf"; exit 0; }
  sleep 0.2
done
stop
cannot "the node did not become idle within 20 s (state '${state:-none}'; see $dir/log/)"
