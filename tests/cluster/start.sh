#!/bin/bash
# Starts the Slurm test cluster "tc" on this host: writes slurm.conf and slurmdbd.conf,
# starts munged, mariadbd, slurmdbd, slurmctld and slurmd (plus slurmd n2 in a network
# namespace with --two-nodes, and the one-host cluster tc1 with --one-host), registers the test
# account and users, and self-tests as the first user. Idempotent: what already runs with an
# unchanged config is left alone.
set -euo pipefail
# A first argument names the Slurm release: 22.05 (the default: Debian 12's, cluster tc) or
# 24.11 (Debian 13's, cluster tc2411 in a root of its own: start-2411.sh).
case ${1:-} in
    24.11) shift && exec "$(dirname "$(readlink -f "$0")")/start-2411.sh" "$@" ;;
    22.05) shift ;;
esac
# shellcheck source=lib.sh
. "$(dirname "$(readlink -f "$0")")/lib.sh"

usage() {
    cat <<EOF
usage: $0 [22.05] [--user NAME]... [--two-nodes] [--one-host] [--no-selftest]
       $0 24.11 [--user NAME]... [--spank EXE | --no-spank] [--no-selftest]  (start-2411.sh --help)
  --user NAME    give Unix user NAME an association in account $TC_ACCOUNT (repeatable);
                 the first one runs the self-test (sbatch --wait, srun, sacct)
  --two-nodes    add node $TC_N2 (a slurmd in network namespace $TC_NETNS, $TC_N2_ADDR)
  --one-host     also start cluster $TC1_CLUSTER beside it: controller and node on this host,
                 at $TC1_ADDR (loopback), ports $TC1_CTLD_PORT/$TC1_SLURMD_PORT, SLURM_CONF=$TC1_SLURM_CONF;
                 once started it is left running (stop.sh stops it)
  --no-selftest  skip the self-test
EOF
}

users=()
two_nodes=0
one_host=0
selftest=1
while (($#)); do
    case $1 in
        --user)
            (($# >= 2)) || die "--user needs a name"
            users+=("$2")
            shift 2
            ;;
        --user=*)
            users+=("${1#--user=}")
            shift
            ;;
        --two-nodes) two_nodes=1 && shift ;;
        --one-host) one_host=1 && shift ;;
        --no-selftest) selftest=0 && shift ;;
        -h | --help) usage && exit 0 ;;
        *) usage >&2 && exit 2 ;;
    esac
done

need_root
t0=$(now_us)

for b in munged mariadbd slurmdbd slurmctld slurmd; do
    [[ -x $(daemon_exe "$b") ]] || die "$(daemon_exe "$b") is missing; fix: run install.sh first"
done
getent hosts "$TC_HOST" >/dev/null || die "host name $TC_HOST does not resolve; fix: run install.sh"
for u in ${users[@]+"${users[@]}"}; do
    id "$u" >/dev/null 2>&1 || die "no Unix user $u; fix: useradd -m $u"
done

# --- directories (after the install: the owners are users the packages create) ---
install -d -m 0755 "$TC_LOG_DIR" "$TC_RUN_DIR"
install -d -m 0755 -o slurm -g slurm "$TC_SLURM_RUN_DIR" "$TC_STATE_DIR"
install -d -m 0755 "$TC_SPOOL_BASE" "$TC_SPOOL_BASE/$TC_HOST" "$TC_SPOOL_BASE/$TC_N2"
for f in slurmctld.log slurmdbd.log; do
    [[ -e $TC_LOG_DIR/$f ]] || install -m 0640 -o slurm -g slurm /dev/null "$TC_LOG_DIR/$f"
done
install -d -m 0700 -o munge -g munge /etc/munge /var/log/munge
install -d -m 0711 -o munge -g munge /var/lib/munge
install -d -m 0755 -o munge -g munge /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
install -d -m 0755 -o mysql -g mysql /run/mysqld

# --- configuration ---

# The database password is made once and kept in slurmdbd.conf (0600, slurm).
db_pass=$(db_password "$TC_SLURMDBD_CONF")
ctld_host=$TC_HOST
acct_host=$TC_HOST
node_addr=""
n2_line="# no second node (start.sh --two-nodes adds $TC_N2)"
nodes=$TC_HOST
if ((two_nodes)); then
    # n2 cannot reach the host through 127.0.0.1 (that is n2's own loopback): everything n2
    # talks to (slurmctld, slurmdbd for sacct, srun, the first node) is given the veth address.
    ctld_host="$TC_HOST($TC_HOST_ADDR)"
    acct_host=$TC_HOST_ADDR
    node_addr=" NodeAddr=$TC_HOST_ADDR"
    nodes="$TC_HOST,$TC_N2"
fi
node_hw="CPUs=$TC_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$TC_CPUS ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
if ((two_nodes)); then
    n2_line="NodeName=$TC_N2 NodeAddr=$TC_N2_ADDR $node_hw"
fi

prolog_flags="PrologFlags=${TC_PROLOG_FLAGS-Alloc}"
[[ -n ${TC_PROLOG_FLAGS-Alloc} ]] || prolog_flags="# no PrologFlags (TC_PROLOG_FLAGS is empty)"
slurm_conf_changed=0
write_conf "$TC_SLURM_CONF" 0644 root:root <<EOF && slurm_conf_changed=1
# Written by agent-sandbox tests/cluster/start.sh; rewritten on every start.
ClusterName=$TC_CLUSTER
SlurmctldHost=$ctld_host
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$TC_STATE_DIR
SlurmdSpoolDir=$TC_SPOOL_BASE/%n
SlurmctldPidFile=$TC_SLURM_RUN_DIR/slurmctld.pid
SlurmdPidFile=$TC_SLURM_RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$TC_LOG_DIR/slurmctld.log
SlurmdLogFile=$TC_LOG_DIR/slurmd-%n.log
$(slurm_conf_policy)
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$acct_host
AccountingStorageEnforce=associations
MailProg=/bin/true
# Every job's prolog on each of its nodes at allocation: the agent-sandbox SPANK plugin
# refuses to run without it (slurm-plugins/README.md). TC_PROLOG_FLAGS= (empty) leaves it out.
$prolog_flags
# Declare more CPUs than the machine has, so several test jobs run at once.
SlurmdParameters=config_overrides
NodeName=$TC_HOST$node_addr $node_hw
$n2_line
PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP
EOF

dbd_conf_changed=0
write_conf "$TC_SLURMDBD_CONF" 0600 slurm:slurm <<EOF && dbd_conf_changed=1
AuthType=auth/munge
DbdHost=$TC_HOST
DbdPort=6819
SlurmUser=slurm
PidFile=$TC_SLURM_RUN_DIR/slurmdbd.pid
LogFile=$TC_LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=$db_pass
StorageLoc=slurm_acct_db
EOF

# A changed config is read only by a restarted daemon.
if ((slurm_conf_changed)); then
    stop_daemon slurmd-n2
    stop_daemon slurmd
    stop_daemon slurmctld
fi
if ((dbd_conf_changed)); then
    stop_daemon slurmdbd
fi
if ((two_nodes)); then
    netns_up
else
    stop_daemon slurmd-n2
    netns_down
fi

# --- daemons, in the order of SLURM-TESTBED.md ---
ensure munged 'munge -n | unmunge' 15 \
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground

if [[ ! -d /var/lib/mysql/mysql ]]; then
    log "initialising the MariaDB data directory"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$TC_LOG_DIR/mariadbd.out" 2>&1
fi
ensure mariadbd 'mariadb-admin --connect-timeout=2 ping' 60 /usr/sbin/mariadbd --user=mysql
mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$db_pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$db_pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF

ensure slurmdbd 'sc sacctmgr -n show cluster' 30 /usr/sbin/slurmdbd -D

register sc ${users[@]+"${users[@]}"}

ensure slurmctld "sc scontrol ping | grep -q 'is UP'" 30 /usr/sbin/slurmctld -D -i
ensure slurmd "node_ready $TC_HOST sc" 30 /usr/sbin/slurmd -D -N "$TC_HOST"
if ((two_nodes)); then
    # nsenter, not `ip netns exec`: that remounts /sys, and slurmd needs /sys/fs/cgroup. The
    # node shares this host's /tmp (a checkout there must be seen by both nodes), so a PMIx
    # step across both nodes collides in /tmp/spmix_appdir_*: tests/slurm.rs runs PMIx on one.
    # n2 has a /run/agent-sandbox-spank of its own (a tmpfs in a mount namespace of its own,
    # everything else shared), as a second machine has: the SPANK plugin's marks of a job are
    # each node's own, and a test of them must not see the first node's.
    install -d -m 0755 /run/agent-sandbox-spank
    ensure slurmd-n2 "node_ready $TC_N2 sc" 30 \
        nsenter --net="/run/netns/$TC_NETNS" unshare -m --propagation private sh -c \
        'mount -t tmpfs -o mode=0755,size=4m asb-spank-n2 /run/agent-sandbox-spank && exec "$@"' sh \
        /usr/sbin/slurmd -D -N "$TC_N2"
fi

# --- the one-host cluster (--one-host) ---
if ((one_host)); then
    install -d -m 0755 "$TC1_CONF_DIR" "$TC_SPOOL_BASE/$TC1_CLUSTER-$TC_HOST"
    install -d -m 0755 -o slurm -g slurm "$TC1_STATE_DIR"
    [[ -e $TC_LOG_DIR/$TC1_CLUSTER-slurmctld.log ]] ||
        install -m 0640 -o slurm -g slurm /dev/null "$TC_LOG_DIR/$TC1_CLUSTER-slurmctld.log"
    tc1_changed=0
    # The SPANK plugin as on tc: Slurm reads the plugstack.conf next to slurm.conf.
    plugstack=$(cat /etc/slurm/plugstack.conf 2>/dev/null || true)
    write_conf "$TC1_CONF_DIR/plugstack.conf" 0644 root:root <<<"$plugstack" && tc1_changed=1
    write_conf "$TC1_SLURM_CONF" 0644 root:root <<EOF && tc1_changed=1
# Written by agent-sandbox tests/cluster/start.sh --one-host; rewritten on every start.
# A one-host cluster: the controller's address and the node's are loopback.
ClusterName=$TC1_CLUSTER
SlurmctldHost=$TC_HOST($TC1_ADDR)
SlurmctldPort=$TC1_CTLD_PORT
SlurmdPort=$TC1_SLURMD_PORT
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
FirstJobId=$TC1_FIRST_JOB
StateSaveLocation=$TC1_STATE_DIR
SlurmdSpoolDir=$TC_SPOOL_BASE/$TC1_CLUSTER-%n
SlurmctldPidFile=$TC_SLURM_RUN_DIR/$TC1_CLUSTER-slurmctld.pid
SlurmdPidFile=$TC_SLURM_RUN_DIR/$TC1_CLUSTER-slurmd-%n.pid
SlurmctldLogFile=$TC_LOG_DIR/$TC1_CLUSTER-slurmctld.log
SlurmdLogFile=$TC_LOG_DIR/$TC1_CLUSTER-slurmd-%n.log
$(slurm_conf_policy)
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
$prolog_flags
SlurmdParameters=config_overrides
NodeName=$TC_HOST NodeAddr=$TC1_ADDR $node_hw
PartitionName=debug Nodes=$TC_HOST Default=YES MaxTime=INFINITE State=UP
EOF
    if ((tc1_changed)); then
        stop_daemon slurmd-tc1
        stop_daemon slurmctld-tc1
    fi
    ensure slurmctld-tc1 "sc1 scontrol ping | grep -q 'is UP'" 30 \
        env SLURM_CONF="$TC1_SLURM_CONF" /usr/sbin/slurmctld -D -i
    ensure slurmd-tc1 "node_ready $TC_HOST sc1" 30 \
        env SLURM_CONF="$TC1_SLURM_CONF" /usr/sbin/slurmd -D -N "$TC_HOST"
fi
t_up=$(now_us)
log "daemons up in $(elapsed "$t0" "$t_up") s (started: ${started[*]:-none})"

# --- self-test ---
if ((selftest)) && ((${#users[@]})); then
    u=${users[0]}
    dir=$(as_user "$u" mktemp -d "/tmp/$TC_NAME-selftest.XXXXXX")
    cd "$dir"
    job=$(as_user "$u" timeout 60 sbatch --parsable --wait -o "$dir/out.txt" --wrap hostname) ||
        die "self-test: sbatch --wait failed as $u (job ${job:-?}); see $TC_LOG_DIR"
    job=${job%%;*}
    grep -qxF "$TC_HOST" "$dir/out.txt" ||
        die "self-test: job $job wrote no host name to $dir/out.txt"
    as_user "$u" timeout 60 srun -n1 true || die "self-test: srun -n1 true failed as $u"
    wait_for "sc sacct -n -X -P -j $job -o State | grep -qx COMPLETED" 15 \
        "self-test: sacct does not show job $job COMPLETED" "$TC_LOG_DIR/slurmdbd.log"
    if ((two_nodes)); then
        # One task per node; each prints the node it runs on.
        seen=$(as_user "$u" timeout 60 srun -N2 --ntasks-per-node=1 printenv SLURMD_NODENAME | sort | tr '\n' ' ')
        [[ $seen == "$(printf '%s\n' "$TC_HOST" "$TC_N2" | sort | tr '\n' ' ')" ]] ||
            die "self-test: srun -N2 ran on '$seen', want $TC_HOST and $TC_N2"
    fi
    if ((one_host)); then
        as_user "$u" env SLURM_CONF="$TC1_SLURM_CONF" timeout 60 srun -n1 true ||
            die "self-test: srun -n1 true failed on $TC1_CLUSTER as $u"
    fi
    cd /
    rm -rf "$dir"
    log "self-test as $u passed in $(elapsed "$t_up" "$(now_us)") s (job $job COMPLETED)"
elif ((selftest)); then
    log "self-test skipped: no --user given"
fi
if ((one_host)); then
    log "cluster $TC1_CLUSTER up (node $TC_HOST at $TC1_ADDR; SLURM_CONF=$TC1_SLURM_CONF)"
fi
log "cluster $TC_CLUSTER up (nodes: $nodes) in $(elapsed "$t0" "$(now_us)") s"
