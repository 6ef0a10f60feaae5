#!/usr/bin/env bash
# The Vagrant VM, booted for real, with no box download: builds the local box if it is missing,
# `vagrant up`, the README's set-up inside the VM, the default scenario inside the VM, its
# results/ back to the host, a check that the run verified, then destroys the VM and removes
# everything of it (domain, network, pool and volumes, firewall rules, the libvirt daemons it
# started). Prints how long each step took; each step is bounded and names itself when it fails.
#
#   bash vagrant/check.sh          (as root, from anywhere; where other work emulates networks,
#                                   under `flock /tmp/topolab-emu.lock`: the VM is CPU-hungry)
#
# Environment: TOPOLAB_VM_CPUS (default 2), TOPOLAB_VM_MEMORY (MiB, default 4096), and each
# step's limit in seconds: TOPOLAB_CHECK_TIMEOUT_BOX (2400), _UP (1800), _SETUP (3600),
# _RUN (3600), _BACK (900), _DESTROY (600). Logs: vagrant/.vagrant/check/ (kept).
# Exit 0: the run verified (its prediction within the scenario's tolerance, or the reason it is
# not printed); 1: a step failed or timed out, or something of the VM was left behind.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
scenario=topoopt-12   # scripts/run.sh's default scenario: results/topoopt-12
# The run inside uses --link-mbps auto: under software emulation the guest's Python is ~17x slower,
# so the rate the cores keep up with is far below the native 100 Mbit/s (docs/emulation.md).
logs=$here/.vagrant/check
export TOPOLAB_BOX=local VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_BOX_UPDATE_CHECK_DISABLE=1 VAGRANT_NO_COLOR=1
export TOPOLAB_VM_CPUS=${TOPOLAB_VM_CPUS:-2} TOPOLAB_VM_MEMORY=${TOPOLAB_VM_MEMORY:-4096}
export TOPOLAB_VM_CONSOLE_LOG=$logs/console.log

say() { printf 'check: %s\n' "$*"; }
fail() { printf 'check: FAILED: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "run as root (libvirt, iptables, the box build)"

mkdir -p "$logs"
rm -f "$logs"/*.log
timings=()
now_ds() { echo $(( ${EPOCHREALTIME/./} / 100000 )); }   # tenths of a second
fmt_ds() { printf '%d.%d' $(( $1 / 10 )) $(( $1 % 10 )); }
t_all=$(now_ds)

# step NAME LIMIT_S COMMAND...: runs COMMAND bounded by LIMIT_S, its output in $logs/NAME.log.
step() {
  local name=$1 limit=$2 rc=0 t0 t
  shift 2
  t0=$(now_ds)
  timeout --kill-after=30 "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  t=$(fmt_ds $(( $(now_ds) - t0 )))
  timings+=("$(printf '%-12s %8s s' "$name" "$t")")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    tail -n 15 "$logs/$name.log" | sed 's/^/  | /' >&2
    fail "step '$name' timed out after ${limit} s (log: $logs/$name.log)"
  fi
  printf 'check: %-12s %8s s  (exit %d)\n' "$name" "$t" "$rc"
  return "$rc"
}

destroyed=""
cleanup() {
  local rc=$?
  if [ -z "$destroyed" ]; then
    say "cleaning up after a failure: vagrant destroy, libvirt.sh stop"
    (cd "$here" && timeout --kill-after=30 600 vagrant destroy -f) >>"$logs/cleanup.log" 2>&1 || true
    timeout 300 bash "$here/libvirt.sh" stop >>"$logs/cleanup.log" 2>&1 || true
    left=$(bash "$here/libvirt.sh" status)
    [ -z "$left" ] || printf 'check: LEFT BEHIND: %s\n' "$left" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- host ---------------------------------------------------------------------------------
host_packages=(vagrant vagrant-libvirt libvirt-daemon-system qemu-system-x86 qemu-utils mmdebstrap
  e2fsprogs fdisk rsync dnsmasq-base iptables openssh-client)
missing=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  timeout 1800 apt-get -o DPkg::Lock::Timeout=300 update -qq >"$logs/packages.log" 2>&1
  timeout 1800 env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${missing[@]}" >>"$logs/packages.log" 2>&1 \
    || fail "installing the host packages failed (log: $logs/packages.log)"
fi
[ -z "$(bash "$here/libvirt.sh" status)" ] || fail "a VM of vagrant/ is already there (bash vagrant/libvirt.sh status): destroy it first"

step box "${TOPOLAB_CHECK_TIMEOUT_BOX:-2400}" bash "$here/build-box.sh" || fail "step 'box' (log: $logs/box.log)"
step libvirt 300 bash "$here/libvirt.sh" start || fail "step 'libvirt' (log: $logs/libvirt.log)"
bash "$here/accel.sh" >"$here/.vagrant/topolab-accel" 2>"$logs/accel.log" || fail "the KVM probe failed"
say "accelerator: $(cat "$here/.vagrant/topolab-accel") ($(sed 's/^accel: //' "$logs/accel.log"))"
say "VM: $TOPOLAB_VM_CPUS vCPUs, $TOPOLAB_VM_MEMORY MiB"

# --- the VM -------------------------------------------------------------------------------
cd "$here"
step up "${TOPOLAB_CHECK_TIMEOUT_UP:-1800}" vagrant up --no-provision \
  || fail "step 'up': boot, ssh or the rsync of the repository (log: $logs/up.log, console: $logs/console.log)"
step guest 300 vagrant ssh --no-tty -c 'echo "kernel $(uname -r), $(nproc) CPUs, $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")"; sudo /sbin/modprobe -n sch_netem 2>/dev/null && echo "netem: module sch_netem available" || echo "netem: no sch_netem module"' \
  || fail "step 'guest' (log: $logs/guest.log)"
sed 's/^/check:   guest /' "$logs/guest.log" | grep -E 'kernel|netem'
step setup "${TOPOLAB_CHECK_TIMEOUT_SETUP:-3600}" vagrant provision --provision-with setup \
  || fail "step 'setup': scripts/setup.sh in the VM (log: $logs/setup.log)"
run_rc=0
step run "${TOPOLAB_CHECK_TIMEOUT_RUN:-3600}" vagrant ssh --no-tty -c 'cd /vagrant && sudo env $(grep ^TOPOLAB_SLOWDOWN= /etc/environment) bash scripts/run.sh --link-mbps auto' || run_rc=$?
grep -E "^$scenario: measured|^topolab: |^report: " "$logs/run.log" | sed 's/^/check:   /' || true
case $run_rc in
  0 | 3) ;;
  *) tail -n 20 "$logs/run.log" | sed 's/^/  | /' >&2
     fail "step 'run': scripts/run.sh in the VM exited $run_rc (log: $logs/run.log)" ;;
esac
step back "${TOPOLAB_CHECK_TIMEOUT_BACK:-900}" bash "$here/rsync-back.sh" \
  || fail "step 'back': results/ from the VM (log: $logs/back.log)"

# --- the results, on the host ---------------------------------------------------------------
results=$repo/results/$scenario/results.json
[ -f "$results" ] || fail "no results/$scenario/results.json on the host after 'back'"
python3 - "$results" "$scenario" <<'EOF' || fail "results/$scenario/results.json: the run did not verify"
import json, sys
r = json.load(open(sys.argv[1]))
s, env, emu = r["summary"], r.get("environment", {}), r.get("emulation", {})
print(f"check:   results/{sys.argv[2]}: status {r.get('status')}, "
      f"verified {s['verified']} over {s['iterations']} timed iterations")
print(f"check:   measured {s.get('median_real_ms', float('nan')):.3f} ms per iteration, "
      f"predicted {r['predicted']['real_ms']:.3f} ms, error {100 * s.get('error', float('nan')):.1f}% "
      f"(tolerance {100 * s.get('tolerance', float('nan')):.0f}%), time scale x{emu.get('time_scale')}")
print(f"check:   in the guest: kernel {env.get('kernel')}, {env.get('cpus')} CPUs, netem {emu.get('netem')}")
if s.get("error_over_tolerance"):
    print("check:   the prediction missed by more than the scenario's tolerance: see the report's top lines")
sys.exit(0 if r.get("status") == "complete" and s["verified"] else 1)
EOF

# --- destroy: nothing may be left ---------------------------------------------------------
step destroy "${TOPOLAB_CHECK_TIMEOUT_DESTROY:-600}" bash -c 'vagrant destroy -f && bash libvirt.sh stop' \
  || fail "step 'destroy' (log: $logs/destroy.log)"
destroyed=1
left=$(bash "$here/libvirt.sh" status)
[ -z "$left" ] || fail "left behind after destroy: $left"
say "nothing of the VM is left (no domain, network, pool, volume, bridge, firewall rule or process of ours)"
total=$(fmt_ds $(( $(now_ds) - t_all )))
say "times:"
printf 'check:   %s\n' "${timings[@]}"
printf 'check:   %-12s %8s s\n' total "$total"
say "OK: the default scenario ran verified in the VM; results/$scenario/results.json is on the host"
