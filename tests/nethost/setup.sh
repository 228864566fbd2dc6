#!/usr/bin/env bash
# Test hosts for the network modes: a network namespace `asbnet` joined to the host by a
# veth pair, so that tests and benches have a "world" with fixed addresses to talk to
# without touching the real network. Run as root.
#
#   setup.sh up     (re)create it: host side asbv0 198.51.100.1 / 2001:db8:51::1,
#                   netns side asbv1 198.51.100.2, .53 / 2001:db8:51::2, ::53
#   setup.sh down   remove it (no error if absent)
#
# The servers themselves are started by tests/nethost/serve.py inside the netns.
# See tests/nethost/README.md.
set -euo pipefail

NS=asbnet
HOST_IF=asbv0
NS_IF=asbv1

down() {
  # Deleting the netns destroys asbv1 and with it its peer asbv0; the explicit delete
  # covers a veth left behind without its netns.
  ip netns del "$NS" 2>/dev/null || true
  ip link del "$HOST_IF" 2>/dev/null || true
}

# Wait until the IPv6 addresses are usable: the link-local address exists (the kernel adds
# it asynchronously once the link has carrier) and nothing on the interface is tentative.
# DAD is off for these interfaces (accept_dad=0 plus nodad), so this is short; a test that
# raced it would see EADDRNOTAVAIL or lost neighbour discovery.
# Usage: wait_v6 DEV [ip-prefix...], e.g. wait_v6 asbv1 ip -n asbnet
wait_v6() {
  local dev=$1
  shift
  for _ in $(seq 1 100); do
    if [ -n "$("$@" -6 addr show dev "$dev" scope link)" ] &&
      [ -z "$("$@" -6 addr show dev "$dev" tentative)" ]; then
      return 0
    fi
    sleep 0.05
  done
  echo "setup.sh: IPv6 addresses of $dev not usable after 5s:" >&2
  "$@" -6 addr show dev "$dev" >&2
  return 1
}

up() {
  down
  ip netns add "$NS"
  ip link add "$HOST_IF" type veth peer name "$NS_IF" netns "$NS"

  # Host side. accept_dad=0 also covers the link-local address the kernel adds itself.
  echo 0 >"/proc/sys/net/ipv6/conf/$HOST_IF/accept_dad"
  ip addr add 198.51.100.1/24 dev "$HOST_IF"
  ip -6 addr add 2001:db8:51::1/64 dev "$HOST_IF" nodad
  ip link set "$HOST_IF" up

  # Netns side: .2 serves TCP/UDP, .53 serves DNS (separate addresses so DNS tests can
  # tell "the resolver" from "a host").
  local nsip=(ip -n "$NS")
  "${nsip[@]}" link set lo up
  # /proc/sys/net is the writer's netns's.
  ip netns exec "$NS" sh -c "echo 0 >/proc/sys/net/ipv6/conf/$NS_IF/accept_dad"
  "${nsip[@]}" addr add 198.51.100.2/24 dev "$NS_IF"
  "${nsip[@]}" addr add 198.51.100.53/24 dev "$NS_IF"
  # model.test: the agents' fake model provider (tests/agents), on an address of its own.
  "${nsip[@]}" addr add 198.51.100.3/24 dev "$NS_IF"
  "${nsip[@]}" -6 addr add 2001:db8:51::2/64 dev "$NS_IF" nodad
  "${nsip[@]}" -6 addr add 2001:db8:51::53/64 dev "$NS_IF" nodad
  "${nsip[@]}" link set "$NS_IF" up
  "${nsip[@]}" route add default via 198.51.100.1
  "${nsip[@]}" -6 route add default via 2001:db8:51::1

  wait_v6 "$HOST_IF" ip
  wait_v6 "$NS_IF" "${nsip[@]}"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
