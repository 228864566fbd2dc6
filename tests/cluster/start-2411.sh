#!/bin/bash
# Starts the Slurm 24.11 test cluster "tc2411" (start.sh 24.11 runs this): builds its Debian
# 13 root if missing (install-2411.sh), copies the host's users and /etc/hosts into it, writes
# its slurm.conf, slurmdbd.conf and slurm.key (auth/slurm, no munge), starts mariadbd, sackd,
# slurmdbd, slurmctld and slurmd in the root (in-2411.sh), registers the test account and
# users, and self-tests as the first user from the login side (the root with sackd). Runs
# beside the 22.05 cluster. Idempotent: what already runs with an unchanged config is left
# alone.
set -euo pipefail
# shellcheck source=lib-2411.sh
. "$(dirname "$(readlink -f "$0")")/lib-2411.sh"

usage() {
    cat <<EOF
usage: $0 [--user NAME]... [--spank EXE | --no-spank] [--no-selftest]
  --user NAME    give Unix user NAME an association in account $TC_ACCOUNT (repeatable);
                 the first one runs the self-test (sbatch --wait, srun, sacct) in the root
  --spank EXE    build slurm-plugins/agent_sandbox.c of this checkout against the root's
                 Slurm $TC24_VERSION headers (into target/slurm-$TC24_VERSION/) and name it, with
                 exe=EXE, in the root's /etc/slurm/plugstack.conf (a change restarts slurmd
                 and slurmctld)
  --no-spank     empty the root's plugstack.conf (same restart)
  --no-selftest  skip the self-test
Client commands: $TC24_DIR/in-2411.sh [-u USER] -- sbatch ...
EOF
}

users=()
selftest=1
spank=keep
spank_exe=""
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
        --spank)
            (($# >= 2)) || die "--spank needs the launcher's path"
            spank=set spank_exe=$2
            shift 2
            ;;
        --no-spank) spank=none && shift ;;
        --no-selftest) selftest=0 && shift ;;
        -h | --help) usage && exit 0 ;;
        *) usage >&2 && exit 2 ;;
    esac
done

need_root
t0=$(now_us)
R=$TC24_ROOT
for u in ${users[@]+"${users[@]}"}; do
    id "$u" >/dev/null 2>&1 || die "no Unix user $u; fix: useradd -m $u"
done
if [[ $spank == set ]]; then
    # Need not exist yet (tests/run.sh names the launcher before cargo builds it).
    [[ $spank_exe == /* ]] ||
        die "--spank $spank_exe: not an absolute path (the launcher the plugin admits, as on every node)"
fi
if [[ $spank == set ]]; then
    command -v cc >/dev/null || die "--spank: no C compiler (cc) to build the SPANK plugin; fix: apt-get install gcc libc6-dev"
fi

if ! root_ready || ! getent hosts "$TC_HOST" >/dev/null; then
    "$TC24_DIR/install-2411.sh"
fi

# --- the root's users, hosts, directories ---
# User and group ids of the root's own system users (its packages made them).
root_id() { awk -F: -v n="$2" '$1 == n { print $3 }' "$R/etc/$1"; }
SLURM_UID=$(root_id passwd slurm) SLURM_GID=$(root_id group slurm)
MYSQL_UID=$(root_id passwd mysql) MYSQL_GID=$(root_id group mysql)
[[ -n $SLURM_UID && -n $SLURM_GID && -n $MYSQL_UID && -n $MYSQL_GID ]] ||
    die "no slurm or mysql user in $R/etc/passwd; fix: rm -rf --one-file-system $R and start again"

# The host's people (uid/gid 1000-59999: the test users and their groups) with the same ids:
# the root's own entries outside that range are kept, its entries in it replaced. Rewritten
# only when it changes (a client may be reading it), by rename.
sync_ids() {
    local file=$1 tmp
    tmp=$(mktemp "$R/etc/.$file.XXXXXX")
    {
        awk -F: '$3 < 1000 || $3 >= 60000' "$R/etc/$file"
        getent "$file" | awk -F: '$3 >= 1000 && $3 < 60000'
    } >"$tmp"
    if cmp -s "$tmp" "$R/etc/$file"; then
        rm -f "$tmp"
    else
        chmod 0644 "$tmp"
        mv "$tmp" "$R/etc/$file"
        log "copied the host's users into $R/etc/$file"
    fi
}
sync_ids passwd
sync_ids group
# The node's name resolves as on the host.
for f in hosts resolv.conf; do
    cmp -s "/etc/$f" "$R/etc/$f" 2>/dev/null || install -m 0644 "/etc/$f" "$R/etc/$f"
done

install -d -m 0755 "$TC_LOG_DIR" "$TC_RUN_DIR"
for f in slurmctld.log slurmdbd.log; do
    [[ -e $TC_LOG_DIR/$f ]] || install -m 0640 -o "$SLURM_UID" -g "$SLURM_GID" /dev/null "$TC_LOG_DIR/$f"
done
# Each side's /run (lib-2411.sh): the sack socket directories exist beforehand, owned by
# SlurmUser (the daemons make them only while still root, which slurmdbd no longer is).
install -d -m 0755 "$R$TC24_RUN_NODE" "$R$TC24_RUN_SERVER"
pid_dir=${TC24_SLURM_RUN_DIR#/run}
install -d -m 0755 -o "$SLURM_UID" -g "$SLURM_GID" "$R$TC24_STATE_DIR" \
    "$R/run/slurm" "$R$TC24_RUN_NODE/slurm" "$R$TC24_RUN_NODE$pid_dir" \
    "$R$TC24_RUN_SERVER/slurmctld" "$R$TC24_RUN_SERVER/slurmdbd" "$R$TC24_RUN_SERVER$pid_dir"
install -d -m 0755 -o "$MYSQL_UID" -g "$MYSQL_GID" "$R$TC24_RUN_SERVER/mysqld"
install -d -m 0755 "$R$TC_SPOOL_BASE" "$R$TC_SPOOL_BASE/$TC_HOST"

# auth/slurm's key: random, owned by SlurmUser, 0600 (the daemons refuse a key others can
# read). Only the daemons read it; clients get credentials from a sack socket.
key=$R/etc/slurm/slurm.key
if [[ ! -s $key ]]; then
    (umask 077 && dd if=/dev/urandom of="$key" bs=1024 count=1 status=none)
    log "made $key"
fi
chown "$SLURM_UID:$SLURM_GID" "$key"
chmod 0600 "$key"

# --- configuration (the root's /etc/slurm) ---

db_pass=$(db_password "$R/etc/slurm/slurmdbd.conf")
node_hw="CPUs=$TC_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$TC_CPUS ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN"
slurm_conf_changed=0
write_conf "$R/etc/slurm/slurm.conf" 0644 0:0 <<EOF && slurm_conf_changed=1
# Written by agent-sandbox tests/cluster/start-2411.sh; rewritten on every start.
# Slurm $TC24_VERSION (Debian 13) beside the 22.05 cluster tc: own ports, key, state, job ids.
ClusterName=$TC_CLUSTER
SlurmctldHost=$TC_HOST
SlurmctldPort=$TC24_CTLD_PORT
SlurmdPort=$TC24_SLURMD_PORT
SlurmUser=slurm
# Slurm's own authentication (slurm.key beside this file); clients on the login side get
# their credentials from sackd's /run/slurm/sack.socket, on the node from slurmd's.
AuthType=auth/slurm
CredType=cred/slurm
FirstJobId=$TC24_FIRST_JOB
StateSaveLocation=$TC24_STATE_DIR
SlurmdSpoolDir=$TC_SPOOL_BASE/%n
SlurmctldPidFile=$TC24_SLURM_RUN_DIR/slurmctld.pid
SlurmdPidFile=$TC24_SLURM_RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$TC_LOG_DIR/slurmctld.log
SlurmdLogFile=$TC_LOG_DIR/slurmd-%n.log
$(slurm_conf_policy)
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$TC_HOST
AccountingStoragePort=$TC24_DBD_PORT
AccountingStorageEnforce=associations
MailProg=/bin/true
# Every job's prolog on each of its nodes at allocation: the agent-sandbox SPANK plugin
# refuses to run without it (slurm-plugins/README.md).
PrologFlags=Alloc
# Declare more CPUs than the machine has, so several test jobs run at once.
SlurmdParameters=config_overrides
NodeName=$TC_HOST $node_hw
PartitionName=debug Nodes=$TC_HOST Default=YES MaxTime=INFINITE State=UP
EOF

dbd_conf_changed=0
write_conf "$R/etc/slurm/slurmdbd.conf" 0600 "$SLURM_UID:$SLURM_GID" <<EOF && dbd_conf_changed=1
AuthType=auth/slurm
DbdHost=$TC_HOST
DbdPort=$TC24_DBD_PORT
SlurmUser=slurm
PidFile=$TC24_SLURM_RUN_DIR/slurmdbd.pid
LogFile=$TC_LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$db_pass
StorageLoc=slurm_acct_db
EOF

# The SPANK plugin, built against the root's spank.h (24.11) with the host's compiler: it
# links against nothing but libc, whose older ABI Debian 13's loads. Its include directory
# holds only a link to the root's slurm/ headers, so no other header of the root is used.
checkout=$(cd "$TC24_DIR/../.." && pwd -P)
plugstack_changed=0
case $spank in
    set)
        out=$checkout/target/slurm-$TC24_VERSION
        install -d -m 0755 "$out" "$out/include"
        ln -sfn "$R/usr/include/slurm" "$out/include/slurm"
        cc -Wall -Wextra -Werror -std=gnu11 -O2 -g -shared -fPIC -I "$out/include" \
            -o "$out/agent_sandbox.so.tmp" "$checkout/slurm-plugins/agent_sandbox.c"
        if cmp -s "$out/agent_sandbox.so.tmp" "$out/agent_sandbox.so"; then
            rm -f "$out/agent_sandbox.so.tmp"
        else
            mv "$out/agent_sandbox.so.tmp" "$out/agent_sandbox.so"
        fi
        chmod o+rx "$checkout" "$checkout/target" "$out"
        write_conf "$R/etc/slurm/plugstack.conf" 0644 0:0 \
            <<<"required $out/agent_sandbox.so exe=$spank_exe" && plugstack_changed=1
        ;;
    none) write_conf "$R/etc/slurm/plugstack.conf" 0644 0:0 </dev/null && plugstack_changed=1 ;;
esac

# slurmd and all it starts see this checkout, $CARGO_TARGET_DIR, in-2411.sh's extra binds
# and the directory /etc/agent-sandbox as they were at its start (a mount holds on to the
# directory, not its path): another checkout's launcher, or a site policy directory made
# anew (tests/admin.rs moves it aside and back), needs a new slurmd.
site_policy=$(stat -c %d:%i /etc/agent-sandbox 2>/dev/null || echo none)
slurmd_context="$checkout ${CARGO_TARGET_DIR:-} ${AGENT_SANDBOX_TC2411_BINDS:-} $site_policy"
context_file=$TC_RUN_DIR/slurmd.context
if daemon_running slurmd && [[ $(cat "$context_file" 2>/dev/null) != "$slurmd_context" ]]; then
    log "slurmd was started from another checkout, with other binds or another /etc/agent-sandbox: restarting it"
    stop_daemon slurmd
fi

# A changed config is read only by a restarted daemon; slurmd learns at its start whether a
# SPANK plugin has a job prolog.
if ((slurm_conf_changed || plugstack_changed)); then
    stop_daemon slurmd
    stop_daemon slurmctld
fi
if ((dbd_conf_changed)); then
    stop_daemon slurmdbd
fi

IN=$TC24_DIR/in-2411.sh
# --- daemons ---
if [[ ! -d $R/var/lib/mysql/mysql ]]; then
    log "initialising the MariaDB data directory"
    "$IN" --side server -- mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$TC_LOG_DIR/mariadbd.out" 2>&1
fi
# No TCP (the host's MariaDB has 3306): slurmdbd reaches it by its socket in the root's /run.
ensure mariadbd "r24s mariadb-admin --connect-timeout=2 ping" 60 \
    "$IN" --side server -- /usr/sbin/mariadbd --user=mysql --skip-networking
r24s mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$db_pass';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$db_pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF

# The login side's credential daemon, as SlurmUser: it makes /run/slurm/sack.socket.
ensure sackd "[[ -S $R/run/slurm/sack.socket ]]" 15 "$IN" -u slurm -- /usr/sbin/sackd -D
ensure slurmdbd "r24 sacctmgr -n show cluster" 30 "$IN" --side server -- /usr/sbin/slurmdbd -D

register r24 ${users[@]+"${users[@]}"}

ensure slurmctld "r24 scontrol ping | grep -q 'is UP'" 30 "$IN" --side server -- /usr/sbin/slurmctld -D -i
if ! daemon_running slurmd; then
    echo "$slurmd_context" >"$context_file"
fi
ensure slurmd "node_ready $TC_HOST r24" 30 "$IN" --side node -- /usr/sbin/slurmd -D -N "$TC_HOST"
t_up=$(now_us)
log "daemons up in $(elapsed "$t0" "$t_up") s (started: ${started[*]:-none})"

# --- self-test, from the login side (the root with sackd, without slurmd's socket) ---
if ((selftest)) && ((${#users[@]})); then
    u=${users[0]}
    dir=$(runuser -u "$u" -- mktemp -d "/tmp/$TC_NAME-selftest.XXXXXX")
    cd "$dir"
    job=$(timeout 60 "$IN" -u "$u" -- sbatch --parsable --wait -o "$dir/out.txt" --wrap hostname) ||
        die "self-test: sbatch --wait failed as $u (job ${job:-?}); see $TC_LOG_DIR"
    job=${job%%;*}
    grep -qxF "$TC_HOST" "$dir/out.txt" ||
        die "self-test: job $job wrote no host name to $dir/out.txt"
    timeout 60 "$IN" -u "$u" -- srun -n1 true || die "self-test: srun -n1 true failed as $u"
    wait_for "r24 sacct -n -X -P -j $job -o State | grep -qx COMPLETED" 15 \
        "self-test: sacct does not show job $job COMPLETED" "$TC_LOG_DIR/slurmdbd.log"
    cd /
    rm -rf "$dir"
    log "self-test as $u passed in $(elapsed "$t_up" "$(now_us)") s (job $job COMPLETED)"
elif ((selftest)); then
    log "self-test skipped: no --user given"
fi
log "cluster $TC_CLUSTER (Slurm $TC24_VERSION) up in $(elapsed "$t0" "$(now_us)") s; clients: $IN [-u USER] -- CMD"
