#!/usr/bin/env bash
# Prints the libvirt domain type this machine can run the VM with: "kvm" where KVM boots a Linux
# kernel, else "qemu" (qemu's software emulation, TCG). /dev/kvm existing is not enough: on some
# nested hosts a KVM guest stops right after the firmware. So the probe boots a kernel under KVM
# with no disk and waits (up to $TOPOLAB_KVM_PROBE_S seconds, default 20) for it to reach its
# root-mount panic, which a working KVM does in about a second.
#
#   bash vagrant/accel.sh [KERNEL...]   -> kvm | qemu, and the reason on stderr
#
# The kernel: the arguments, else this machine's own (/boot/vmlinuz-$(uname -r), /vmlinuz), else
# the local box's (build-box.sh ships it as vmlinuz). With no readable kernel or no qemu to
# probe with, a usable /dev/kvm is trusted.
set -uo pipefail
why() { printf 'accel: %s\n' "$*" >&2; }

if [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
  why "qemu: /dev/kvm is missing or not usable by $(id -un)"
  echo qemu
  exit 0
fi
qemu=$(command -v qemu-system-x86_64 || true)
kernels=("$@")
if [ ${#kernels[@]} -eq 0 ]; then
  kernels=("/boot/vmlinuz-$(uname -r)" /vmlinuz /boot/vmlinuz)
  kernels+=("${VAGRANT_HOME:-$HOME/.vagrant.d}"/boxes/*/*/libvirt/vmlinuz)
fi
kernel=""
for k in "${kernels[@]}"; do
  if [ -f "$k" ] && [ -r "$k" ]; then kernel=$k; break; fi
done
if [ -z "$qemu" ] || [ -z "$kernel" ]; then
  why "kvm: /dev/kvm is usable (no ${qemu:+kernel}${qemu:-qemu-system-x86_64} to probe it with)"
  echo kvm
  exit 0
fi
limit=${TOPOLAB_KVM_PROBE_S:-20}
out=$(timeout -s KILL "$limit" "$qemu" -accel kvm -cpu host -m 256 -nodefaults -nographic \
  -no-reboot -serial stdio -kernel "$kernel" -append "console=ttyS0 panic=-1" 2>&1)
if grep -q "Unable to mount root fs\|Kernel panic" <<<"$out"; then
  why "kvm: $kernel booted to its root-mount step under KVM"
  echo kvm
else
  last=$(tr -d '\r' <<<"$out" | grep -a -v '^[[:space:]]*$' | tail -n 1 | tr -cd '[:print:]' | cut -c1-100)
  why "qemu: $kernel did not boot under KVM (within ${limit}s; last output: ${last:-none})"
  echo qemu
fi
