#!/usr/bin/env bash
# Builds a Debian 12 Vagrant box for the libvirt provider from Debian's packages alone (no box
# download) and adds it as $TOPOLAB_LOCAL_BOX (vagrant/local.env); `TOPOLAB_BOX=local vagrant up`
# then uses it.
#
#   bash vagrant/build-box.sh [--force]     (as root; --force rebuilds a box already added)
#
# How, without loop devices or mounts: mmdebstrap installs Debian 12 (minbase, the stock kernel,
# sshd, sudo, rsync, ifupdown with DHCP on eth0) into a directory; the box's settings are written
# into that directory; `mke2fs -d` makes an ext4 file system of it at 1 MiB into a raw disk file
# with one MBR partition; GRUB's boot sector and a core image made by the image's own
# grub-mkimage go into the disk's first MiB (GRUB's default embedding: core image at sector 1);
# qemu-img turns the disk into qcow2, and the box is metadata.json, a Vagrantfile, box.img and
# the kernel (vmlinuz, for the Vagrantfile's KVM probe) in a tar.gz.
#
# The box is Vagrant's usual one: a `vagrant` user with passwordless sudo, Vagrant's insecure
# public key (from the vagrant package) in its authorized_keys, sshd with host keys made at first
# boot. It also carries this machine's package access, so that the guest reaches Debian's
# packages and PyPI the way this machine does: the apt sources (this machine's when it runs
# Debian 12, else deb.debian.org), apt's Acquire settings (proxies, validity checks), the pip
# configuration and the local CA certificates (/usr/local/share/ca-certificates), and the
# http(s)_proxy variables when set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vagrant/local.env
source "$here/local.env"
# shellcheck source=vagrant/lib.sh
source "$here/lib.sh"
force=""
[ "${1:-}" = "--force" ] && force=1

say() { printf 'build-box: %s\n' "$*" >&2; }
die() { printf 'build-box: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap and chroot need it)"
for tool in mmdebstrap mke2fs sfdisk qemu-img vagrant; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install mmdebstrap e2fsprogs fdisk qemu-utils vagrant vagrant-libvirt"
done
if vagrant box list 2>/dev/null | grep >/dev/null "^$TOPOLAB_LOCAL_BOX .*libvirt"; then
  if [ -z "$force" ]; then
    say "box $TOPOLAB_LOCAL_BOX is already added (--force rebuilds it)"
    exit 0
  fi
fi

# Vagrant's insecure public key, as the vagrant package ships it.
pubkey=$(find /usr/share/rubygems-integration /usr/share/vagrant /opt/vagrant /usr/lib/ruby \
  -path '*vagrant*/keys/vagrant.pub' 2>/dev/null | head -n 1 || true)
[ -n "$pubkey" ] || die "Vagrant's insecure public key (keys/vagrant.pub) not found: is the vagrant package installed?"

disk_gib=${TOPOLAB_BOX_DISK_GIB:-20}
work=$(mktemp -d /var/tmp/topolab-box.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root

# --- 1. Debian 12 into a directory --------------------------------------------------------
packages=(
  systemd-sysv udev linux-image-amd64 initramfs-tools grub-pc-bin
  ifupdown isc-dhcp-client netbase iproute2 openssh-server sudo rsync ca-certificates procps
)
mapfile -t sources < <(box_apt_sources)
[ ${#sources[@]} -gt 0 ] || sources=("${BOX_DEFAULT_SOURCES[@]}")
aptopts=()
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  # proxies, validity checks of a snapshot mirror, ...: how this machine reaches the archive
  [ -f "$f" ] && grep -q '^[[:space:]]*Acquire' "$f" && aptopts+=("--aptopt=$f")
done
[ -n "${http_proxy:-}" ] && aptopts+=("--aptopt=Acquire::http::Proxy \"$http_proxy\"")
[ -n "${https_proxy:-}" ] && aptopts+=("--aptopt=Acquire::https::Proxy \"$https_proxy\"")
# A small initramfs (the stock one holds every driver: 35 MB that software emulation takes
# 12 s to unpack): only the virtio and SATA disk drivers and ext4, set before the kernel is
# installed.
mkdir -p "$work/initramfs/conf.d" "$work/initramfs/hooks"
echo MODULES=list >"$work/initramfs/conf.d/topolab-box"
cat >"$work/initramfs/hooks/topolab-box" <<'EOF'
#!/bin/sh
[ "$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
manual_add_modules virtio_pci virtio_blk virtio_scsi ahci ata_piix sd_mod ext4
EOF
chmod 755 "$work/initramfs/hooks/topolab-box"
say "mmdebstrap: Debian 12 with ${packages[*]} (sources: ${sources[*]})"
mmdebstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" "${aptopts[@]}" \
  --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/etc/initramfs-tools/hooks"' \
  --essential-hook="copy-in $work/initramfs/conf.d/topolab-box /etc/initramfs-tools/conf.d/" \
  --essential-hook="copy-in $work/initramfs/hooks/topolab-box /etc/initramfs-tools/hooks/" \
  --quiet bookworm "$root" "${sources[@]}"

# --- 2. the box's settings ------------------------------------------------------------------
uuid=$(cat /proc/sys/kernel/random/uuid)
kernel=$(cd "$root/boot" && ls vmlinuz-* | sort -V | tail -n 1)
initrd=initrd.img-${kernel#vmlinuz-}
[ -f "$root/boot/$initrd" ] || die "no initramfs for $kernel in the image"

echo topolab-box >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\ttopolab-box\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
echo "UUID=$uuid / ext4 errors=remount-ro 0 1" >"$root/etc/fstab"
cat >"$root/etc/network/interfaces" <<'EOF'
source /etc/network/interfaces.d/*
auto lo
iface lo inet loopback
allow-hotplug eth0
iface eth0 inet dhcp
EOF
# the vagrant user: insecure key, passwordless sudo (password "vagrant", as Vagrant's boxes have)
chroot "$root" useradd --create-home --shell /bin/bash --groups sudo vagrant
echo 'vagrant:vagrant' | chroot "$root" chpasswd
install -d -m 700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
install -m 600 -o 1000 -g 1000 "$pubkey" "$root/home/vagrant/.ssh/authorized_keys"
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' >"$root/etc/sudoers.d/vagrant"
chmod 440 "$root/etc/sudoers.d/vagrant"
# nothing that starts by itself: apt's daily runs would hold dpkg's lock during provisioning
chroot "$root" systemctl mask --quiet apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  e2scrub_all.timer e2scrub_reap.service fstrim.timer getty-static.service
# sshd: host keys made at first boot (each VM its own), no reverse DNS look-ups
rm -f "$root"/etc/ssh/ssh_host_*
install -d "$root/etc/systemd/system/ssh.service.d"
printf '[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
  >"$root/etc/systemd/system/ssh.service.d/host-keys.conf"
echo 'UseDNS no' >"$root/etc/ssh/sshd_config.d/vagrant.conf"
# this machine's package access: CA certificates, pip configuration, proxy variables
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
for f in "${BOX_PIP_FILES[@]}"; do
  [ -f "$f" ] && install -D -m 644 "$f" "$root$f"
done
for v in http_proxy https_proxy no_proxy; do
  [ -n "${!v:-}" ] && echo "$v=${!v}" >>"$root/etc/environment"
done
# GRUB: a fixed configuration (no grub-pc package, so no update-grub or grub-install later);
# /vmlinuz and /initrd.img are the kernel package's own symlinks, so a kernel upgrade boots.
ln -sfn "boot/$kernel" "$root/vmlinuz"
ln -sfn "boot/$initrd" "$root/initrd.img"
install -d "$root/boot/grub"
cp -r "$root/usr/lib/grub/i386-pc" "$root/boot/grub/"
cat >"$root/boot/grub/grub.cfg" <<EOF
set timeout=0
linux /vmlinuz root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8 net.ifnames=0
initrd /initrd.img
boot
EOF
chroot "$root" grub-mkimage -O i386-pc -o /tmp/core.img -p '(hd0,msdos1)/boot/grub' \
  biosdisk part_msdos ext2 normal configfile linux gzio echo test
mv "$root/tmp/core.img" "$work/core.img"
cp "$root/boot/$kernel" "$work/vmlinuz"
cp "$root/usr/lib/grub/i386-pc/boot.img" "$work/boot.img"
chroot "$root" apt-get clean

# --- 3. the disk: MBR, GRUB in the first MiB, ext4 from the directory at 1 MiB -------------
disk=$work/disk.raw
truncate -s "${disk_gib}G" "$disk"
echo 'start=2048, type=83, bootable' | sfdisk --quiet "$disk"
fs_blocks=$(( (disk_gib * 1024 * 1024 - 1024) / 4 ))   # 4 KiB blocks after the first MiB
mke2fs -q -t ext4 -b 4096 -L root -U "$uuid" -E offset=1048576 -d "$root" "$disk" "$fs_blocks"
[ "$(stat -c %s "$work/core.img")" -le $(( 2047 * 512 )) ] || die "GRUB's core image does not fit in the first MiB"
dd if="$work/boot.img" of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$disk" bs=512 seek=1 conv=notrunc status=none
rm -rf "$root"

# --- 4. the box ---------------------------------------------------------------------------
box_dir=$work/box
mkdir "$box_dir"
qemu-img convert -O qcow2 "$disk" "$box_dir/box.img"
rm -f "$disk"
mv "$work/vmlinuz" "$box_dir/vmlinuz"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$disk_gib" >"$box_dir/metadata.json"
cat >"$box_dir/Vagrantfile" <<'EOF'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
EOF
tar -C "$box_dir" -czf "$work/topolab-debian12.box" metadata.json Vagrantfile box.img vmlinuz
say "box: $(du -h "$work/topolab-debian12.box" | cut -f1) ($kernel)"
vagrant box add --force --name "$TOPOLAB_LOCAL_BOX" "$work/topolab-debian12.box" >/dev/null
say "added as $TOPOLAB_LOCAL_BOX"
