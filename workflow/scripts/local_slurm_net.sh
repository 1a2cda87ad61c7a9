# shellcheck shell=bash
# The private network of a multi-node local SLURM cluster: sourced by local_slurm.sh.
#
# Node i (1..N) is a network namespace "<prefix>-node<i>" joined to the bridge "<prefix>0" by a veth
# pair; the bridge holds the controller's address NET.1 (slurmctld, srun and the clients in the host
# namespace), node i has NET.(10+i). Nothing is routed anywhere else: no default route, no NAT, the
# bridge has no uplink, so every packet stays between these namespaces on this machine. Node names
# resolve through a marked block in /etc/hosts (removed again by net_down). Each slurmd runs in its
# node's namespace and in its own UTS namespace whose hostname is the node name, so the node's
# processes (slurmd, job steps, torchrun, gloo) see their own hostname and address.
#
# Needs: STATE_DIR, NODES, say/warn/die from local_slurm.sh.

NET="${TOOLBOX_SLURM_NET:-10.213.0}"
NET_PREFIX="${TOOLBOX_SLURM_NET_PREFIX:-tbslurm}"
NODE_PREFIX="${TOOLBOX_SLURM_NODE_PREFIX:-tbnode}"
BRIDGE="${NET_PREFIX}0"
HOSTS_BEGIN="# >>> toolbox local_slurm nodes (workflow/scripts/local_slurm.sh; removed on stop)"
HOSTS_END="# <<< toolbox local_slurm nodes"

controller_addr() { echo "$NET.1"; }
node_name() { echo "$NODE_PREFIX$1"; }
node_addr() { echo "$NET.$((10 + $1))"; }
node_ns() { echo "$NET_PREFIX-node$1"; }
node_veth() { echo "${NET_PREFIX}v$1"; }

# net_possible: exit 0, or print why namespaces cannot be used here and exit non-zero.
net_possible() {
    command -v ip >/dev/null || {
        echo "no 'ip' command (Debian package iproute2)"
        return 1
    }
    command -v unshare >/dev/null || {
        echo "no 'unshare' command (util-linux)"
        return 1
    }
    local probe="${NET_PREFIX}-probe$$" err
    if ! err=$(ip netns add "$probe" 2>&1); then
        echo "cannot create a network namespace ('ip netns add': ${err:-failed})"
        return 1
    fi
    if ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then
        ip netns del "$probe" 2>/dev/null || true
        echo "cannot create a UTS namespace inside a network namespace ('unshare --uts': ${err:-failed})"
        return 1
    fi
    ip netns del "$probe" 2>/dev/null || true
    if ! err=$(ip link add "${NET_PREFIX}probe" type bridge 2>&1); then
        echo "cannot create a bridge ('ip link add type bridge': ${err:-failed})"
        return 1
    fi
    ip link del "${NET_PREFIX}probe" 2>/dev/null || true
}

# The /etc/hosts block naming every node (rewritten in place: /etc/hosts may be a bind mount).
hosts_without_block() {
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' /etc/hosts
}

hosts_write() {
    local content=$1
    printf '%s\n' "$content" >"/etc/hosts.local_slurm.$$"
    cat "/etc/hosts.local_slurm.$$" >/etc/hosts
    rm -f "/etc/hosts.local_slurm.$$"
}

net_up() {
    local i ns veth content
    net_down quiet
    ip link add "$BRIDGE" type bridge
    ip addr add "$(controller_addr)/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((i = 1; i <= NODES; i++)); do
        ns=$(node_ns "$i")
        veth=$(node_veth "$i")
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        ip link set "$veth" master "$BRIDGE" up
        ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
    echo "$NODES" >"$STATE_DIR/net_nodes"
    content=$(hosts_without_block)
    content+=$'\n'"$HOSTS_BEGIN"
    for ((i = 1; i <= NODES; i++)); do content+=$'\n'"$(node_addr "$i") $(node_name "$i")"; done
    content+=$'\n'"$HOSTS_END"
    hosts_write "$content"
    say "network: bridge $BRIDGE $(controller_addr)/24; nodes $(node_name 1)..$(node_name "$NODES")" \
        "at $(node_addr 1)..$(node_addr "$NODES") in namespaces $(node_ns 1)..$(node_ns "$NODES")"
}

# net_down [quiet]: remove the namespaces, veths, bridge and hosts block this script made.
net_down() {
    local n i
    n=$(cat "$STATE_DIR/net_nodes" 2>/dev/null || echo 0)
    [[ "$n" =~ ^[0-9]+$ ]] || n=0
    for ((i = 1; i <= n; i++)); do
        ip link del "$(node_veth "$i")" 2>/dev/null || true
        ip netns del "$(node_ns "$i")" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if grep -qxF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null; then hosts_write "$(hosts_without_block)"; fi
    rm -f "$STATE_DIR/net_nodes"
    if [[ "${1:-}" != quiet ]] && ((n > 0)); then say "network of $n node(s) removed"; fi
}
