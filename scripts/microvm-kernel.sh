#!/usr/bin/env bash
# Fetches the microVM guest kernel: the versioned Debian package that
# linux-image-amd64 depends on, downloaded with apt-get download (never
# installed on the host) and unpacked with dpkg-deb -x under
# .tools/microvm/<version>/. Only vmlinuz, modules.dep and the module files
# the guest's initramfs may need are kept, so the cache stays small.
# Beside vmlinuz it keeps vmlinux, the kernel decompressed: QEMU boots
# that ELF directly (PVH), skipping the self-decompression that takes a
# TCG guest about three seconds of every cold boot.
# Idempotent: a second run finds the stamp and only prints the version; a
# cache made by an older module list (its stamp names another list version)
# is fetched again, so a module added to the list reaches every host.
set -euo pipefail

# extract_vmlinux DIR writes DIR/vmlinux from DIR/vmlinuz: Debian's bzImage
# carries the kernel as one xz stream after the setup code.
extract_vmlinux() {
  local dir=$1 off
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$dir/vmlinuz" | head -1 | cut -d: -f1)
  if [ -z "$off" ]; then
    echo "microvm-kernel: no xz stream in vmlinuz; guests boot the compressed kernel" >&2
    return 0
  fi
  # xz stops at the stream's end; tail, fed through a process substitution,
  # may then die of SIGPIPE without failing the script.
  xz -dc --single-stream < <(tail -c +$((off + 1)) "$dir/vmlinuz") > "$dir/.vmlinux.tmp"
  if [ "$(head -c 4 "$dir/.vmlinux.tmp" | od -An -tx1 | tr -d ' ')" != 7f454c46 ]; then
    rm -f "$dir/.vmlinux.tmp"
    echo "microvm-kernel: the decompressed kernel is not an ELF file; guests boot the compressed kernel" >&2
    return 0
  fi
  mv "$dir/.vmlinux.tmp" "$dir/vmlinux"
}

TOOLS_DIR="${SPACE_TOOLS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.tools}"
DEST="$TOOLS_DIR/microvm"
mkdir -p "$DEST"

# The metapackage's first Depends is the versioned image package.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$pkg" ]; then
  echo "microvm-kernel: apt knows no linux-image-amd64 (run apt-get update)" >&2
  exit 1
fi
ver=${pkg#linux-image-}
out="$DEST/$ver"
# Bump when the kept module list below changes (2: 9p for volume shares).
list_version=2
if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$list_version" ]; then
  echo "==> microvm kernel: $ver (cached)"
  ln -sfn "$ver" "$DEST/current"
  exit 0
fi

work=$(mktemp -d "$DEST/.fetch-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "==> microvm kernel: downloading $pkg (about 70 MB)"
(cd "$work" && apt-get download -q "$pkg")
deb=$(ls "$work"/*.deb)
echo "==> microvm kernel: unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$work/x"

mkdir -p "$work/out/modules"
cp "$work/x/boot/vmlinuz-$ver" "$work/out/vmlinuz"
extract_vmlinux "$work/out"
moddir="$work/x/lib/modules/$ver"
cp "$moddir/modules.dep" "$work/out/modules/" 2>/dev/null || true
# The image ships modules.dep only if depmod ran at build time; Debian's
# package leaves it to the postinst, so build it here from the files when
# it is missing (depmod -b works on any directory, without installing).
if [ ! -s "$work/out/modules/modules.dep" ]; then
  depmod -b "$work/x" "$ver"
  cp "$moddir/modules.dep" "$work/out/modules/"
fi
# Keep only what a guest may load early: the virtio transports and
# devices, ext4 with its helpers and checksum driver, virtio networking,
# vsock, and 9p over virtio with its netfs and fscache helpers (persistent
# volumes are 9p shares, loaded only by a guest that mounts one). modules.dep stays whole; the initramfs builder follows it from the
# modules it wants and names any file this list left out.
(cd "$moddir" && find kernel/drivers/virtio kernel/drivers/char/hw_random kernel/fs/ext4 kernel/fs/jbd2 \
    kernel/net/vmw_vsock kernel/fs/9p kernel/fs/netfs kernel/fs/fscache -name '*.ko*'
 ls kernel/net/9p/9pnet.ko* kernel/net/9p/9pnet_virtio.ko* 2>/dev/null
 ls kernel/drivers/block/virtio_blk.ko* kernel/drivers/char/virtio_console.ko* \
    kernel/drivers/net/virtio_net.ko* kernel/drivers/net/net_failover.ko* kernel/net/core/failover.ko* \
    kernel/fs/mbcache.ko* kernel/lib/crc16.ko* kernel/lib/libcrc32c.ko* kernel/crypto/crc32c_generic.ko* \
    kernel/arch/x86/crypto/crc32c-intel.ko* kernel/drivers/firmware/qemu_fw_cfg.ko* 2>/dev/null) |
  while read -r f; do mkdir -p "$work/out/modules/$(dirname "$f")"; cp "$moddir/$f" "$work/out/modules/$f"; done
echo "$ver" > "$work/out/version"
echo "$list_version" > "$work/out/.complete"
rm -rf "$out"
mv "$work/out" "$out"
ln -sfn "$ver" "$DEST/current"
echo "==> microvm kernel: $ver in $out ($(du -sh "$out" | cut -f1))"
