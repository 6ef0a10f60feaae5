#!/usr/bin/env bash
# The libvirt side of the local box, on a machine with no box download and no systemd:
#
#   bash vagrant/libvirt.sh start    (as root) libvirtd and virtlogd if they are not running,
#                                    the storage pool and the NAT network of vagrant/local.env,
#                                    and a firewall that lets the guest reach only the package
#                                    registries (HTTP/HTTPS) and the network's DHCP and DNS
#   bash vagrant/libvirt.sh stop     removes all of it again: our domain (if still there), our
#                                    pool with its volumes, our network, our firewall rules, the
#                                    daemons start started (by PID), and net.ipv4.ip_forward
#                                    back to what it was
#   bash vagrant/libvirt.sh status   what of it exists now (no output: nothing)
#
# Only objects named in vagrant/local.env are touched; what start finds running stays running.
# The Vagrantfile runs start before `vagrant up` and stop after `vagrant destroy` when it uses the
# local box (TOPOLAB_BOX=local); vagrant/check.sh runs both too. Safe to run again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vagrant/local.env
source "$here/local.env"
# shellcheck source=vagrant/lib.sh
source "$here/lib.sh"
state=/run/topolab-vagrant
uri=qemu:///system
fw_forward=TOPOLAB-VAGRANT-FWD
fw_input=TOPOLAB-VAGRANT-IN
domain_prefix=topolab-vagrant-

say() { printf 'libvirt: %s\n' "$*" >&2; }
die() { printf 'libvirt: %s\n' "$*" >&2; exit 1; }
virsh_() { timeout 60 virsh -q -c "$uri" "$@"; }
connected() { timeout 10 virsh -q -c "$uri" version >/dev/null 2>&1; }

start_daemons() {
  mkdir -p "$state"
  if connected; then return 0; fi
  # libvirtd leaves /run/libvirt behind: stop removes it when it was not there before
  [ -e /run/libvirt ] || [ -f "$state/started" ] || touch "$state/run_libvirt_absent"
  local d pid
  for d in virtlogd libvirtd; do
    if pgrep -x -r R,S,D "$d" >/dev/null; then continue; fi   # a zombie is not running
    rm -f "/run/$d.pid"
    "$d" -d
    for _ in $(seq 50); do [ -s "/run/$d.pid" ] && break; sleep 0.2; done
    pid=$(cat "/run/$d.pid" 2>/dev/null) || die "$d did not start (no /run/$d.pid after 10 s)"
    echo "$d $pid" >>"$state/started"
    say "started $d (pid $pid)"
  done
  for _ in $(seq 60); do connected && return 0; sleep 0.5; done
  die "libvirtd does not answer on $uri after 30 s"
}

# (grep >/dev/null, not grep -q, below: under pipefail, grep -q leaving early makes virsh die of
# SIGPIPE and the pipe fail, so an active pool would be started a second time)
define_pool() {
  if ! virsh_ pool-info "$TOPOLAB_VM_POOL" >/dev/null 2>&1; then
    virsh_ pool-define-as "$TOPOLAB_VM_POOL" dir --target "$TOPOLAB_VM_POOL_DIR" >/dev/null
    virsh_ pool-build "$TOPOLAB_VM_POOL" >/dev/null
  fi
  virsh_ pool-info "$TOPOLAB_VM_POOL" | grep >/dev/null 'State:.*running' || virsh_ pool-start "$TOPOLAB_VM_POOL" >/dev/null
}

define_network() {
  local cidr=$TOPOLAB_VM_NETWORK_ADDRESS net prefix
  net=${cidr%/*}
  prefix=${cidr#*/}
  [ "$prefix" = 24 ] || die "TOPOLAB_VM_NETWORK_ADDRESS must be a /24 (is $cidr)"
  case $net in 198.18.* | 198.19.*) die "$cidr is the emulated networks' range (198.18.0.0/15)" ;; esac
  local base=${net%.*}
  if ! virsh_ net-info "$TOPOLAB_VM_NETWORK" >/dev/null 2>&1; then
    local xml
    xml=$(mktemp)
    cat >"$xml" <<EOF
<network>
  <name>$TOPOLAB_VM_NETWORK</name>
  <forward mode='nat'/>
  <bridge name='$TOPOLAB_VM_BRIDGE' stp='on' delay='0'/>
  <ip address='$base.1' netmask='255.255.255.0'>
    <dhcp><range start='$base.2' end='$base.254'/></dhcp>
  </ip>
</network>
EOF
    virsh_ net-define "$xml" >/dev/null
    rm -f "$xml"
  fi
  if ! virsh_ net-info "$TOPOLAB_VM_NETWORK" | grep >/dev/null 'Active:.*yes'; then
    # libvirt turns on forwarding for NAT and adds its LIBVIRT_* iptables chains, which it never
    # removes: remember what was there, stop puts it back
    [ -f "$state/ip_forward" ] || cat /proc/sys/net/ipv4/ip_forward >"$state/ip_forward"
    iptables -S LIBVIRT_FWX >/dev/null 2>&1 || touch "$state/libvirt_chains_absent"
    virsh_ net-start "$TOPOLAB_VM_NETWORK" >/dev/null
  fi
}

# The guest may open TCP connections to the registries' addresses on ports 80 and 443 (through
# the network's NAT), and talk to the host only for DHCP and DNS; nothing else leaves the bridge.
firewall_on() {
  local hosts ips=() h
  mapfile -t hosts < <(registry_hosts)
  for h in "${hosts[@]}"; do
    mapfile -t -O "${#ips[@]}" ips < <(getent ahostsv4 "$h" | awk '{print $1}' | sort -u)
  done
  mapfile -t ips < <(printf '%s\n' "${ips[@]}" | sort -u)
  [ ${#ips[@]} -gt 0 ] || die "none of the registries (${hosts[*]}) resolves: the guest could not install packages"
  firewall_off
  iptables -N "$fw_forward"
  for ip in "${ips[@]}"; do
    iptables -A "$fw_forward" -d "$ip" -p tcp -m multiport --dports 80,443 -j ACCEPT
  done
  iptables -A "$fw_forward" -j REJECT
  iptables -N "$fw_input"
  iptables -A "$fw_input" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
  iptables -A "$fw_input" -p udp -m multiport --dports 53,67 -j ACCEPT
  iptables -A "$fw_input" -p tcp --dport 53 -j ACCEPT
  iptables -A "$fw_input" -j REJECT
  iptables -I FORWARD 1 -i "$TOPOLAB_VM_BRIDGE" -j "$fw_forward"
  iptables -I INPUT 1 -i "$TOPOLAB_VM_BRIDGE" -j "$fw_input"
  say "guest may reach ${hosts[*]} (${ips[*]}) on TCP 80/443, nothing else"
}

firewall_off() {
  while iptables -D FORWARD -i "$TOPOLAB_VM_BRIDGE" -j "$fw_forward" 2>/dev/null; do :; done
  while iptables -D INPUT -i "$TOPOLAB_VM_BRIDGE" -j "$fw_input" 2>/dev/null; do :; done
  local c
  for c in "$fw_forward" "$fw_input"; do
    if iptables -S "$c" >/dev/null 2>&1; then
      iptables -F "$c"
      iptables -X "$c"
    fi
  done
}

# libvirt's own chains, only when they hold no rule of anything else (its networks are gone)
libvirt_chains_off() {
  local t c chains
  for t in filter nat mangle; do
    chains=$(iptables -t "$t" -S | awk '$1 == "-N" && $2 ~ /^LIBVIRT_/ {print $2}')
    for c in $chains; do
      [ -z "$(iptables -t "$t" -S "$c" | grep -v '^-N')" ] || return 0
    done
    for c in $chains; do
      while read -r rule; do
        # shellcheck disable=SC2086
        iptables -t "$t" ${rule/-A/-D}
      done < <(iptables -t "$t" -S | grep -E "^-A [A-Z]+ -j $c\$")
      iptables -t "$t" -X "$c"
    done
  done
}

start() {
  [ "$(id -u)" -eq 0 ] || die "run as root"
  start_daemons
  define_pool
  define_network
  firewall_on
}

stop() {
  [ "$(id -u)" -eq 0 ] || die "run as root"
  local dom v
  if connected; then
    for dom in $(virsh_ list --all --name | grep "^$domain_prefix" || true); do
      virsh_ destroy "$dom" >/dev/null 2>&1 || true
      virsh_ undefine "$dom" --nvram >/dev/null 2>&1 || virsh_ undefine "$dom" >/dev/null 2>&1 || true
      say "removed domain $dom"
    done
    if virsh_ pool-info "$TOPOLAB_VM_POOL" >/dev/null 2>&1; then
      virsh_ pool-start "$TOPOLAB_VM_POOL" >/dev/null 2>&1 || true
      for v in $(virsh_ vol-list "$TOPOLAB_VM_POOL" 2>/dev/null | awk '{print $1}'); do
        virsh_ vol-delete --pool "$TOPOLAB_VM_POOL" "$v" >/dev/null
      done
      virsh_ pool-destroy "$TOPOLAB_VM_POOL" >/dev/null 2>&1 || true
      virsh_ pool-delete "$TOPOLAB_VM_POOL" >/dev/null 2>&1 || true
      virsh_ pool-undefine "$TOPOLAB_VM_POOL" >/dev/null
    fi
    if virsh_ net-info "$TOPOLAB_VM_NETWORK" >/dev/null 2>&1; then
      virsh_ net-destroy "$TOPOLAB_VM_NETWORK" >/dev/null 2>&1 || true
      virsh_ net-undefine "$TOPOLAB_VM_NETWORK" >/dev/null
    fi
  fi
  firewall_off
  rmdir "$TOPOLAB_VM_POOL_DIR" 2>/dev/null || true
  if [ -f "$state/started" ]; then
    local d pid
    while read -r d pid; do
      if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ]; then
        kill "$pid"
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.2; done
        [ -d "/proc/$pid" ] && die "$d (pid $pid) did not stop within 10 s"
        say "stopped $d (pid $pid)"
      fi
    done < <(tac "$state/started")   # libvirtd before virtlogd
    rm -f "$state/started"
  fi
  if [ -f "$state/libvirt_chains_absent" ] && ! pgrep -x -r R,S,D libvirtd >/dev/null; then
    libvirt_chains_off
    rm -f "$state/libvirt_chains_absent"
  fi
  if [ -f "$state/run_libvirt_absent" ] && ! pgrep -x -r R,S,D libvirtd >/dev/null \
    && ! pgrep -x -r R,S,D virtlogd >/dev/null; then
    rm -rf /run/libvirt
    rm -f "$state/run_libvirt_absent"
  fi
  rm -f /var/log/libvirt/qemu/"$domain_prefix"*.log
  if [ -f "$state/ip_forward" ]; then
    cat "$state/ip_forward" >/proc/sys/net/ipv4/ip_forward
    rm -f "$state/ip_forward"
  fi
  rmdir "$state" 2>/dev/null || true
}

# Everything of ours that exists now, one line each (no output: nothing).
status() {
  if connected; then
    virsh_ list --all --name | grep "^$domain_prefix" | sed 's/^/domain /' || true
    virsh_ pool-info "$TOPOLAB_VM_POOL" >/dev/null 2>&1 && echo "pool $TOPOLAB_VM_POOL"
    virsh_ net-info "$TOPOLAB_VM_NETWORK" >/dev/null 2>&1 && echo "network $TOPOLAB_VM_NETWORK"
  fi
  [ -d "$TOPOLAB_VM_POOL_DIR" ] && echo "directory $TOPOLAB_VM_POOL_DIR"
  ip link show "$TOPOLAB_VM_BRIDGE" >/dev/null 2>&1 && echo "bridge $TOPOLAB_VM_BRIDGE"
  iptables -S "$fw_forward" >/dev/null 2>&1 && echo "iptables chain $fw_forward"
  iptables -S "$fw_input" >/dev/null 2>&1 && echo "iptables chain $fw_input"
  if [ -f "$state/started" ]; then
    local d pid
    while read -r d pid; do
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$d" ] && echo "process $d $pid (started by libvirt.sh)"
    done <"$state/started"
  fi
  pgrep -a -f "qemu-system.*guest=$domain_prefix" | sed 's/^/process /' || true
  return 0
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: bash vagrant/libvirt.sh start|stop|status" ;;
esac
