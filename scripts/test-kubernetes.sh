#!/usr/bin/env bash
# The Kubernetes end-to-end test (issue 12): a one-machine Kubernetes from
# real components (scripts/kube-up.sh), the space images imported into its
# containerd (scripts/image.sh), the chart installed with helm, the cluster
# flow through the Services (test/kubernetes TestInstalledChart), latency
# through the Service, helm uninstall, and a check that the host keeps no
# sandbox, netns, subvolume or mount of the install. Everything it started
# is torn down at the end, on failure and on Ctrl-C.
#
#   scripts/test-kubernetes.sh [--keep]    --keep leaves the cluster up (kube-up.sh down removes it)
#
# Builds on a fresh machine take long (Kubernetes components, helm, CNI,
# CoreDNS: tens of CPU-minutes); they are cached under .tools.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
KEEP=""
[ "${1:-}" = "--keep" ] && KEEP=1

export KUBE_UP_DIR="${KUBE_UP_DIR:-/tmp/space-kube}"
NS=space RELEASE=space
NODE_DATA=/var/tmp/space-k8s-node
BIN="$(mktemp -d /tmp/space-k8s-bin.XXXXXX)"
VALUES=(--set postgresql.persistence.enabled=false --set node.dataDir=$NODE_DATA
  --set node.buildTemplates=minimal --set node.uplinkPool=10.232.0.0/20
  --set sandboxes.defaultTemplate=minimal --set image.pullPolicy=Never --set postgresql.image.pullPolicy=Never)
START=$(date +%s)
log() { echo "$(date -u +%H:%M:%S) test-kubernetes: $*"; }
die() { log "FAILED: $*"; exit 1; }

installed=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$KEEP" ]; then log "--keep: the cluster stays up (source $KUBE_UP_DIR/env; scripts/kube-up.sh down)"; exit $rc; fi
  if [ -n "$installed" ] && [ -f "$KUBE_UP_DIR/env" ]; then
    log "uninstalling after a failure"
    (source "$KUBE_UP_DIR/env"; helm uninstall "$RELEASE" -n "$NS" --wait --timeout 5m >/dev/null 2>&1 || true)
  fi
  scripts/kube-up.sh down || true
  release_node_data
  rm -rf "$BIN"
  log "done in $(( $(date +%s) - START )) s (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# release_node_data removes what a node pod left under NODE_DATA (after a
# failure: sandboxes, mounts, loop devices) and the directory itself.
release_node_data() {
  [ -d "$NODE_DATA" ] || return 0
  pkill -f "runsc.*$NODE_DATA" 2>/dev/null || true
  sleep 1
  { findmnt -rn -o TARGET | grep "^$NODE_DATA" || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  { losetup -j "$NODE_DATA/volumes.img" -O NAME -n 2>/dev/null || true; } | while read -r d; do losetup -d "$d" 2>/dev/null || true; done
  rm -rf "$NODE_DATA"
}

log "building tools and images (cached under .tools)"
scripts/kube-tools.sh
scripts/image.sh space postgres pause busybox
CGO_ENABLED=0 go build -o "$BIN/space" ./cmd/space

release_node_data
# The node pod's data dir and /run/netns are Bidirectional mounts, which
# need a shared mount on the host. systemd makes / shared; this machine
# has no systemd, so the two directories become shared mounts of their own.
share_mount() {
  mkdir -p "$1"
  mountpoint -q "$1" || mount --bind "$1" "$1"
  mount --make-rshared "$1"
}
share_mount "$NODE_DATA"
share_mount /run/netns
scripts/kube-up.sh up
source "$KUBE_UP_DIR/env"
NODE=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}')
kubectl label node "$NODE" space.dev/node=true --overwrite >/dev/null

log "helm install $RELEASE (namespace $NS): ${VALUES[*]}"
t0=$(date +%s%N)
installed=1
helm install "$RELEASE" deploy/helm/space -n "$NS" --create-namespace "${VALUES[@]}" >/dev/null
# Progress until every pod of the release is ready.
deadline=$(( $(date +%s) + 900 ))
while :; do
  status=$(kubectl -n "$NS" get pods -o 'jsonpath={range .items[*]}{.metadata.name}={.status.phase}/{range .status.containerStatuses[*]}{.ready}{end} {end}')
  log "pods: ${status:-none yet}"
  if [ -n "$status" ] && ! grep -qv -- '/true$' <<<"$(tr ' ' '\n' <<<"$status" | grep -v '^$' | grep -v uninstall)"; then break; fi
  [ "$(date +%s)" -lt "$deadline" ] || { kubectl -n "$NS" describe pods | tail -60; die "pods not ready after 15 minutes"; }
  sleep 5
done
export SPACE_URL="http://$(kubectl -n "$NS" get svc "$RELEASE-api" -o jsonpath='{.spec.clusterIP}'):7070"
export SPACE_API_KEY=$(kubectl -n "$NS" get secret "$RELEASE-secrets" -o jsonpath='{.data.admin-key}' | base64 -d)
log "waiting for the node to hold the minimal template"
until "$BIN/space" template ls 2>/dev/null | grep -q '^minimal .*ready'; do
  [ "$(date +%s)" -lt "$deadline" ] || die "template minimal not ready"
  sleep 3
done
first=$("$BIN/space" sandbox create --template minimal --wait)
t1=$(date +%s%N)
log "install time, chart applied to first sandbox running: $(( (t1 - t0) / 1000000 )) ms (sandbox $first)"
"$BIN/space" sandbox rm "$first" >/dev/null

log "latency through the Service ($SPACE_URL)"
"$BIN/space" bench --template minimal --skip density,throughput,lifecycle,baselines,file_1mib -n 20 2>&1 | grep -Ev '^bench: .* [0-9]+/[0-9]+' || true

log "the cluster flow (go test ./test/kubernetes -run TestInstalledChart)"
SPACE_KUBE_E2E=1 SPACE_KUBE_NAMESPACE=$NS SPACE_KUBE_RELEASE=$RELEASE SPACE_KUBE_VALUES="${VALUES[*]}" \
  go test -count=1 -v -timeout 30m -run TestInstalledChart ./test/kubernetes/ 2>&1 | sed 's/^/    /'
[ "${PIPESTATUS[0]}" -eq 0 ] || die "TestInstalledChart"

log "helm uninstall (its hook removes every sandbox first)"
helm uninstall "$RELEASE" -n "$NS" --wait --timeout 5m
installed=""
kubectl delete namespace "$NS" --wait --timeout 3m >/dev/null
# What the install left on the host: nothing of the node's.
sleep 3
left=""
pgrep -af "runsc.*$NODE_DATA" >/dev/null && left+=" runsc processes: $(pgrep -f "runsc.*$NODE_DATA" | tr '\n' ' ');"
mounts=$(findmnt -rn -o TARGET | grep "^$NODE_DATA/" || true)
[ -z "$mounts" ] || left+=" mounts: $(echo $mounts);"
loops=$(losetup -j "$NODE_DATA/volumes.img" -O NAME -n 2>/dev/null || true)
[ -z "$loops" ] || left+=" loop devices: $(echo $loops);"
# Sandbox uplinks are numbered from the install's pool, 10.232.0.0/20.
links=$(ip -o -4 addr show | awk '$4 ~ /^10\.232\./ {print $2}' || true)
[ -z "$links" ] || left+=" sandbox links: $(echo $links);"
[ -z "$left" ] || die "helm uninstall left behind:$left"
log "helm uninstall left no sandbox, netns, subvolume, mount or loop device behind"
log "PASSED"
