#!/usr/bin/env bash
# Installs what space needs on a fresh Debian machine of this kind: host
# packages from the Debian mirror and a static runsc built from the pinned
# gvisor.dev/gvisor module. Idempotent: a second run only checks.
set -euo pipefail

GVISOR_VERSION="${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}"
TOOLS_DIR="${SPACE_TOOLS_DIR:-$(cd "$(dirname "$0")/.." && pwd)/.tools}"

need_pkgs=()
for pair in btrfs:btrfs-progs debootstrap:debootstrap nft:nftables ip:iproute2 \
            busybox:busybox-static losetup:mount mkfs.btrfs:btrfs-progs \
            qemu-system-x86_64:qemu-system-x86 mkfs.ext4:e2fsprogs depmod:kmod; do
  bin=${pair%%:*}; pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
# busybox-static specifically: the dynamic busybox cannot run inside a minimal rootfs.
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need_pkgs+=(busybox-static)
# PostgreSQL for the store's tests, which run a private cluster of their own
# (internal/pgtest). Debian would also create and start a system cluster
# "main": tell it not to, so that installing touches no system instance.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  need_pkgs+=(postgresql)
  mkdir -p /etc/postgresql-common/createcluster.d
  echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/space-no-main.conf
fi
# etcd for internal/kubetest's kube-apiserver; containerd and runc for the
# one-machine cluster of scripts/kube-up.sh. Without systemd no service starts:
# each test runs its own process on its own data dir.
# Python's venv and pip for compat/e2b-py (the E2B Python SDKs' suite);
# Debian splits them out of python3.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv python3-pip)
for pair in etcd:etcd-server containerd:containerd runc:runc; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need_pkgs+=("${pair#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need_pkgs[@]}" | sort -u) file >/dev/null
fi

mkdir -p "$TOOLS_DIR/bin"
stamp="$TOOLS_DIR/bin/.runsc-$GVISOR_VERSION"
if [ ! -x "$TOOLS_DIR/bin/runsc" ] || [ ! -f "$stamp" ]; then
  echo "==> building runsc $GVISOR_VERSION (static, about a minute)"
  CGO_ENABLED=0 GOBIN="$TOOLS_DIR/bin" go install "gvisor.dev/gvisor/runsc@$GVISOR_VERSION"
  rm -f "$TOOLS_DIR"/bin/.runsc-*; touch "$stamp"
fi
echo "==> runsc: $("$TOOLS_DIR/bin/runsc" --version 2>/dev/null | head -1)"

# The microVM backend's guest kernel, unpacked under .tools/microvm (never
# installed on the host).
SPACE_TOOLS_DIR="$TOOLS_DIR" "$(dirname "$0")/microvm-kernel.sh"
