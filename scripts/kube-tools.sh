#!/usr/bin/env bash
# Builds the Kubernetes toolchain from the Go module proxy (no download site
# nor container registry is reachable here) into .tools, keyed by version:
#   .tools/kube/<k8s>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl}
#   .tools/helm/<helm>/bin/helm
#   .tools/cni/<cni>/bin/{bridge,host-local,loopback,portmap}
#   .tools/coredns/<coredns>/bin/coredns
# Each binary is static (CGO_ENABLED=0), stripped, and carries a stamp holding
# the hash of its tools module's go.sum: a second run with the same pins skips
# it. The pins live in tools/{kubernetes,helm,cni,coredns}/go.mod.
#
# Usage: scripts/kube-tools.sh [--only name,name,...] [--print-dirs]
#   names: apiserver controller-manager scheduler kubelet proxy kubectl helm cni coredns
#   (default: all of them). The main suite needs only "apiserver,helm".
#   --print-dirs prints the bin directories as shell assignments and exits.
# The Kubernetes commands asked for are built by ONE go build so that their
# shared packages compile once. A lock under .tools serialises runs from
# several worktrees, since .tools is shared and nothing must build twice.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS_DIR="${SPACE_TOOLS_DIR:-$ROOT/.tools}"
K8S_VERSION=v1.37.2
HELM_VERSION=v3.22.0
CNI_VERSION=v1.9.1
COREDNS_VERSION=v1.14.7

KUBE_BIN="$TOOLS_DIR/kube/$K8S_VERSION/bin"
HELM_BIN="$TOOLS_DIR/helm/$HELM_VERSION/bin"
CNI_BIN="$TOOLS_DIR/cni/$CNI_VERSION/bin"
COREDNS_BIN="$TOOLS_DIR/coredns/$COREDNS_VERSION/bin"

all="apiserver,controller-manager,scheduler,kubelet,proxy,kubectl,helm,cni,coredns"
only="$all"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --only=*) only="${1#--only=}"; shift ;;
    --print-dirs)
      printf 'KUBE_BIN=%q\nHELM_BIN=%q\nCNI_BIN=%q\nCOREDNS_BIN=%q\n' "$KUBE_BIN" "$HELM_BIN" "$CNI_BIN" "$COREDNS_BIN"
      exit 0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "kube-tools: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "$(date -u +%H:%M:%S) kube-tools: $*"; }

# sum_of MODULE: a hash of the tools module's pins and sources; a binary's
# stamp holds the hash it was built from.
sum_of() { cat "$ROOT/tools/$1"/go.mod "$ROOT/tools/$1"/go.sum "$ROOT/tools/$1"/*.go | sha256sum | cut -c1-16; }
# stamp_ok BINARY SUM: the binary exists and was built from this hash.
stamp_ok() { [ -x "$1" ] && [ -f "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ]; }

# build MODULE OUTDIR LDFLAGS PKG...: one go build of PKGs into OUTDIR, through
# a scratch dir so an interrupted build leaves no half-written binary behind.
# Prints a heartbeat every minute with the number of packages compiled so far.
build() {
  local mod="$1" out="$2" ldflags="$3"; shift 3
  local tmp; tmp="$(mktemp -d "$out/.build.XXXXXX")"
  local logf="$tmp/build.log" start=$SECONDS
  log "building $* ($mod module), log $logf"
  ( cd "$ROOT/tools/$mod" && CGO_ENABLED=0 nice -n 10 go build -v -trimpath \
      -ldflags "-s -w $ldflags" -o "$tmp/" "$@" ) >"$logf" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && log "  $mod: $(( (SECONDS - start) / 60 )) min, $(grep -c . "$logf" || true) packages compiled"
  done
  if ! wait "$pid"; then
    tail -n 30 "$logf" >&2
    log "FAILED building $* (log kept in $logf)"
    return 1
  fi
  local sum; sum="$(sum_of "$mod")"
  for f in "$tmp"/*; do
    [ "$f" = "$logf" ] && continue
    mv -f "$f" "$out/"; echo "$sum" > "$out/$(basename "$f").stamp"
  done
  rm -rf "$tmp"
  log "built $* in $((SECONDS - start)) s"
}

# component name : command under k8s.io/kubernetes/cmd
KUBE_CMDS="apiserver:kube-apiserver controller-manager:kube-controller-manager scheduler:kube-scheduler
           kubelet:kubelet proxy:kube-proxy kubectl:kubectl"
want() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for n in ${only//,/ }; do
  case ",$all," in *",$n,"*) ;; *) echo "kube-tools: unknown component $n (known: $all)" >&2; exit 2 ;; esac
done

# all_cached: every binary asked for is present with a matching stamp. Checked
# before taking the lock, so that a cached run never waits behind another
# worktree's build of components it does not need.
all_cached() {
  local pair n
  for pair in $KUBE_CMDS; do
    n=${pair%%:*}; want "$n" || continue
    stamp_ok "$KUBE_BIN/${pair#*:}" "$(sum_of kubernetes)" || return 1
  done
  if want helm; then stamp_ok "$HELM_BIN/helm" "$(sum_of helm)" || return 1; fi
  if want cni; then
    for n in bridge host-local loopback portmap; do stamp_ok "$CNI_BIN/$n" "$(sum_of cni)" || return 1; done
  fi
  if want coredns; then stamp_ok "$COREDNS_BIN/coredns" "$(sum_of coredns)" || return 1; fi
  return 0
}
if all_cached; then log "all cached ($only)"; exit 0; fi

mkdir -p "$KUBE_BIN" "$HELM_BIN" "$CNI_BIN" "$COREDNS_BIN"
exec 9>"$TOOLS_DIR/kube/.kube-tools.lock"
if ! flock -n 9; then
  log "another kube-tools run holds $TOOLS_DIR/kube/.kube-tools.lock, waiting for it"
  flock 9
fi

# Kubernetes: the version ldflags are those of hack/lib/version.sh, so that
# /version, kubelet's node status and helm's kubeVersion checks see v1.37.2
# instead of v0.0.0-master.
ksum="$(sum_of kubernetes)"
kpkgs=()
for pair in $KUBE_CMDS; do
  n=${pair%%:*}; cmd=${pair#*:}
  want "$n" || continue
  if stamp_ok "$KUBE_BIN/$cmd" "$ksum"; then log "$cmd $K8S_VERSION cached"; else kpkgs+=("k8s.io/kubernetes/cmd/$cmd"); fi
done
if [ ${#kpkgs[@]} -gt 0 ]; then
  minor=${K8S_VERSION#v*.}; minor=${minor%%.*}; major=${K8S_VERSION#v}; major=${major%%.*}
  kld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    kld+=" -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  build kubernetes "$KUBE_BIN" "$kld" "${kpkgs[@]}"
fi

if want helm; then
  if stamp_ok "$HELM_BIN/helm" "$(sum_of helm)"; then log "helm $HELM_VERSION cached"
  else build helm "$HELM_BIN" "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" helm.sh/helm/v3/cmd/helm; fi
fi

if want cni; then
  csum="$(sum_of cni)" cpkgs=()
  for p in main/bridge ipam/host-local main/loopback meta/portmap; do
    stamp_ok "$CNI_BIN/${p#*/}" "$csum" || cpkgs+=("github.com/containernetworking/plugins/plugins/$p")
  done
  if [ ${#cpkgs[@]} -gt 0 ]; then
    build cni "$CNI_BIN" "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" "${cpkgs[@]}"
  else log "cni plugins $CNI_VERSION cached"; fi
fi

if want coredns; then
  if stamp_ok "$COREDNS_BIN/coredns" "$(sum_of coredns)"; then log "coredns $COREDNS_VERSION cached"
  else
    build coredns "$COREDNS_BIN" "" corednstools
    mv -f "$COREDNS_BIN/corednstools" "$COREDNS_BIN/coredns"
    mv -f "$COREDNS_BIN/corednstools.stamp" "$COREDNS_BIN/coredns.stamp"
  fi
fi
log "done ($only)"
