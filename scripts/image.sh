#!/usr/bin/env bash
# Builds container images without Docker or a registry, as OCI archives
# under .tools/images that `ctr -n k8s.io images import`, `kind load
# image-archive`, `crane push` and skopeo (oci-archive:) accept.
#
#   scripts/image.sh [--tag REF] [-o FILE] [IMAGE...]
#
# IMAGE is one of (default: space):
#   space     static space + space-agent (CGO_ENABLED=0) and runsc in
#             /usr/local/bin over a Debian minbase with what the node runs
#             (btrfs-progs, nftables, iproute2, mount, debootstrap, ...).
#             Default ref ghcr.io/space-platform/space:dev, .tools/images/space.oci.tar
#   pause     a static pod-sandbox process, registry.k8s.io/pause:3.10
#   busybox   Debian's busybox-static, docker.io/library/busybox:1.35 and :latest
#   postgres  Debian's postgresql-15 with an entrypoint honouring the
#             official image's POSTGRES_* variables, docker.io/library/postgres:15
# --tag and -o apply to the single IMAGE named (repeat --tag for more refs).
#
# Needs root (debootstrap). Cached: a Debian rootfs is kept as a tarball
# keyed by suite, mirror and package list, and an archive is rewritten only
# when a hash of all its inputs changes, so a second run takes seconds.
# DEBIAN_MIRROR and DEBIAN_SUITE override what /etc/apt and /etc/os-release say.
set -euo pipefail
shopt -s inherit_errexit   # rootfs and deb_file run in $(...): fail there too
cd "$(dirname "$0")/.."
ROOT=$PWD
IMAGES="$ROOT/.tools/images"
GVISOR_RUNSC="$ROOT/.tools/bin/runsc"

log() { echo "$(date -u +%H:%M:%S) image: $*"; }
die() { echo "$(date -u +%H:%M:%S) image: error: $*" >&2; exit 1; }

tags=() out="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tags+=("$2"); shift 2 ;;
    -o) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    space|pause|busybox|postgres) targets+=("$1"); shift ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(space)
if { [ ${#tags[@]} -gt 0 ] || [ -n "$out" ]; } && [ ${#targets[@]} -ne 1 ]; then
  die "--tag and -o need exactly one IMAGE"
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, and file owners in the layers)"
mkdir -p "$IMAGES"

# Everything transient lives in one directory removed on exit.
WORK=$(mktemp -d /var/tmp/space-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

SUITE=${DEBIAN_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
if [ -z "${DEBIAN_MIRROR:-}" ]; then
  DEBIAN_MIRROR=$( { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
                     grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'; } \
                   | grep -m1 '/debian/\?$' || true)
  DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
fi

# The image writer lives in its own module so go-containerregistry stays
# out of the main go.mod; go's build cache makes a rebuild instant.
OCIIMAGE="$WORK/ociimage"
(cd tools/ociimage && CGO_ENABLED=0 go build -o "$OCIIMAGE" .)

# hash_inputs prints one hash of files and strings: the cache key of an archive.
hash_inputs() {
  local a
  for a in "$@"; do
    if [ -f "$a" ]; then sha256sum <"$a"; else printf '%s\n' "$a" | sha256sum; fi
  done | sha256sum | cut -c1-32
}

# write_image NAME OUT KEY -- OCIIMAGE-ARGS...: runs ociimage unless OUT
# was written from the same KEY.
write_image() {
  local name=$1 dest=$2 key=$3; shift 4
  local stamp="$dest.key"
  if [ -f "$dest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
    log "$name: up to date, $dest ($(du -h "$dest" | cut -f1))"
    return
  fi
  log "$name: writing $dest"
  "$OCIIMAGE" -o "$dest" "$@"
  echo "$key" >"$stamp"
}

# tar_layer DIR OUT: a reproducible layer tarball of DIR (root-owned).
tar_layer() {
  tar --create --file "$2" --directory "$1" --sort=name --mtime=@0 \
      --owner=0 --group=0 --numeric-owner --format=posix --pax-option=delete=atime,delete=ctime .
}

# rootfs NAME PACKAGES [CUSTOMIZE-FUNCTION]: prints the path of a cached
# gzipped tarball of a Debian minbase rootfs with PACKAGES, building it
# the first time. CUSTOMIZE-FUNCTION, given the rootfs path, runs before
# packing (its body is part of the cache key).
rootfs() {
  local name=$1 pkgs=$2 customize=${3:-}
  local key; key=$(hash_inputs "$SUITE" "$DEBIAN_MIRROR" "$pkgs" "rootfs-v1" "$(declare -f "$customize" 2>/dev/null || true)")
  local tarball="$IMAGES/rootfs-$name-$SUITE-$key.tar.gz"
  if [ -f "$tarball" ]; then echo "$tarball"; return; fi
  local dir="$WORK/rootfs-$name"
  log "$name: debootstrap --variant=minbase $SUITE ($DEBIAN_MIRROR) with $pkgs (a few minutes, once)" >&2
  mkdir -p "$IMAGES/debs"
  # debootstrap mounts /proc and /sys inside the target; a private mount
  # namespace makes sure none of them outlives it, whatever happens.
  unshare --mount --propagation private debootstrap --variant=minbase --cache-dir="$IMAGES/debs" \
    --include="$pkgs" "$SUITE" "$dir" "$DEBIAN_MIRROR" >"$WORK/debootstrap-$name.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap-$name.log" >&2; die "debootstrap $name failed"; }
  # What a container needs no copy of: apt's lists and caches, docs, the
  # host's resolver config (the runtime mounts its own) and device nodes.
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/log/* \
         "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
         "$dir"/dev/* "$dir"/run/* "$dir"/tmp/*
  : >"$dir/etc/resolv.conf"
  echo "space-image" >"$dir/etc/hostname"
  if [ -n "$customize" ]; then "$customize" "$dir"; fi
  log "$name: packing the rootfs ($(du -sh "$dir" | cut -f1))" >&2
  tar --create --directory "$dir" --sort=name --numeric-owner --format=posix \
      --pax-option=delete=atime,delete=ctime . | gzip -6 -n >"$tarball.partial"
  mv "$tarball.partial" "$tarball"
  rm -rf "$dir"
  log "$name: cached $tarball ($(du -h "$tarball" | cut -f1))" >&2
  echo "$tarball"
}

# deb_file PACKAGE: prints the path of PACKAGE's .deb, downloaded once.
deb_file() {
  local f
  f=$(ls "$IMAGES"/debs/"$1"_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    mkdir -p "$IMAGES/debs"
    (cd "$IMAGES/debs" && apt-get download -q -o APT::Sandbox::User=root "$1" >&2) || die "apt-get download $1"
    f=$(ls "$IMAGES"/debs/"$1"_*.deb | head -1)
  fi
  echo "$f"
}

build_pause() {
  local dest=${out:-$IMAGES/pause.oci.tar} dir="$WORK/pause"
  local refs=("${tags[@]}")
  [ ${#refs[@]} -gt 0 ] || refs=(registry.k8s.io/pause:3.10)
  mkdir -p "$dir"
  log "pause: building the static pause binary"
  (cd tools/ociimage && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/pause" ./pause)
  tar_layer "$dir" "$WORK/pause.tar"
  write_image pause "$dest" "$(hash_inputs "$WORK/pause.tar" "$OCIIMAGE" "${refs[@]}")" -- \
    --layer "$WORK/pause.tar" --entrypoint /pause --user 65535:65535 $(printf -- '--tag %s ' "${refs[@]}")
}

build_busybox() {
  local dest=${out:-$IMAGES/busybox.oci.tar} dir="$WORK/busybox" deb version
  deb=$(deb_file busybox-static)
  version=$(dpkg-deb -f "$deb" Version | sed 's/^[0-9]*://; s/-.*//')   # 1:1.35.0-4 -> 1.35.0
  local refs=("${tags[@]}")
  [ ${#refs[@]} -gt 0 ] || refs=("docker.io/library/busybox:${version%.*}" docker.io/library/busybox:latest)
  dpkg-deb -x "$deb" "$WORK/busybox-deb"
  mkdir -p "$dir/bin" "$dir/etc" "$dir/tmp" "$dir/root" "$dir/home" "$dir/var/tmp" "$dir/proc" "$dir/sys" "$dir/dev"
  install -m 0755 "$WORK/busybox-deb/bin/busybox" "$dir/bin/busybox"
  local applet
  for applet in $("$dir/bin/busybox" --list-full); do
    [ "$applet" = bin/busybox ] && continue
    mkdir -p "$dir/$(dirname "$applet")"
    ln -sf /bin/busybox "$dir/$applet"
  done
  chmod 1777 "$dir/tmp" "$dir/var/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
  tar_layer "$dir" "$WORK/busybox.tar"
  write_image busybox "$dest" "$(hash_inputs "$WORK/busybox.tar" "$OCIIMAGE" "${refs[@]}")" -- \
    --layer "$WORK/busybox.tar" --cmd sh $(printf -- '--tag %s ' "${refs[@]}")
}

# postgres_customize: the cluster Debian's postinst made is not the
# image's (the entrypoint runs initdb on PGDATA); listen on every address
# like the official image does.
postgres_customize() {
  rm -rf "$1"/etc/postgresql/15/main "$1"/var/lib/postgresql/15
  # The official image's postgres is uid/gid 999, which pod specs name in
  # runAsUser (the chart does); Debian's postinst picked a system id.
  local uid gid
  uid=$(chroot "$1" id -u postgres) gid=$(chroot "$1" id -g postgres)
  chroot "$1" groupmod -g 999 postgres
  chroot "$1" usermod -u 999 -g 999 postgres
  chroot "$1" find / -xdev \( -uid "$uid" -o -gid "$gid" \) -exec chown -h 999:999 {} +
  sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" "$1"/usr/share/postgresql/15/postgresql.conf.sample
  # /var/run is an absolute symlink to /run: name the real path, or the
  # host's /run would be the one changed.
  mkdir -p "$1"/var/lib/postgresql/data "$1"/docker-entrypoint-initdb.d "$1"/run/postgresql
  chroot "$1" chown postgres:postgres /var/lib/postgresql/data /run/postgresql
  chmod 0700 "$1"/var/lib/postgresql/data
  chmod 2777 "$1"/run/postgresql
}

build_postgres() {
  local dest=${out:-$IMAGES/postgres.oci.tar} dir="$WORK/postgres" base
  local refs=("${tags[@]}")
  [ ${#refs[@]} -gt 0 ] || refs=(docker.io/library/postgres:15)
  base=$(rootfs postgres postgresql-15,ca-certificates postgres_customize)
  mkdir -p "$dir/usr/local/bin"
  install -m 0755 tools/ociimage/postgres/docker-entrypoint.sh "$dir/usr/local/bin/docker-entrypoint.sh"
  tar_layer "$dir" "$WORK/postgres-entry.tar"
  write_image postgres "$dest" "$(hash_inputs "$base" "$WORK/postgres-entry.tar" "$OCIIMAGE" "${refs[@]}")" -- \
    --layer "$base" --layer "$WORK/postgres-entry.tar" \
    --entrypoint docker-entrypoint.sh --cmd postgres \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/lib/postgresql/15/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --env PGDATA=/var/lib/postgresql/data \
    --expose 5432/tcp --volume /var/lib/postgresql/data --stop-signal SIGINT \
    $(printf -- '--tag %s ' "${refs[@]}")
}

# The packages of the space image: what the node and the template builder
# run (internal/storage, internal/network, internal/template, runsc), plus
# CA certificates for TLS to the control plane and mirrors. python3 is not
# among them: only the sandboxes' own templates run it.
SPACE_PACKAGES=btrfs-progs,nftables,iproute2,mount,util-linux,busybox-static,debootstrap,passwd,procps,ca-certificates,gpgv,debian-archive-keyring,wget,tar,xz-utils

build_space() {
  local dest=${out:-$IMAGES/space.oci.tar} dir="$WORK/space" base version
  version=$(git describe --always --dirty 2>/dev/null || echo dev)
  local refs=("${tags[@]}")
  [ ${#refs[@]} -gt 0 ] || refs=(ghcr.io/space-platform/space:dev)
  [ -x "$GVISOR_RUNSC" ] || die "no $GVISOR_RUNSC: run the runsc part of scripts/install-deps.sh"
  base=$(rootfs space "$SPACE_PACKAGES")
  mkdir -p "$dir/usr/local/bin"
  log "space: building static space and space-agent ($version)"
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$dir/usr/local/bin/space" ./cmd/space
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$dir/usr/local/bin/space-agent" ./cmd/space-agent
  install -m 0755 "$GVISOR_RUNSC" "$dir/usr/local/bin/runsc"
  tar_layer "$dir" "$WORK/space-bin.tar"
  write_image space "$dest" "$(hash_inputs "$base" "$WORK/space-bin.tar" "$OCIIMAGE" "$version" "${refs[@]}")" -- \
    --layer "$base" --layer "$WORK/space-bin.tar" --entrypoint /usr/local/bin/space \
    --label org.opencontainers.image.source=https://github.com/space-platform/space \
    --label "org.opencontainers.image.revision=$version" \
    $(printf -- '--tag %s ' "${refs[@]}")
}

start=$(date +%s)
for t in "${targets[@]}"; do "build_$t"; done
log "done in $(( $(date +%s) - start ))s"
