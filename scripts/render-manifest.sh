#!/usr/bin/env bash
# Writes deploy/kubernetes/space.yaml: the Helm chart (deploy/helm/space)
# rendered with its defaults as release "space" in namespace "space", for
# kubectl users. The Secrets are left out (a committed file must hold no
# generated secret): create space-secrets and space-postgresql first, as
# docs/kubernetes.md shows. test/kubernetes checks the file is current.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/kube-tools.sh --only helm >/dev/null
HELM=".tools/helm/v3.22.0/bin/helm"
out=deploy/kubernetes/space.yaml
mkdir -p "$(dirname "$out")"
{
  echo "# space, the Helm chart deploy/helm/space rendered with its defaults (scripts/render-manifest.sh)."
  echo "# Apply after creating the namespace and the two Secrets (docs/kubernetes.md, \"Without Helm\"):"
  echo "#   kubectl create namespace space"
  echo "#   kubectl -n space create secret generic space-secrets --from-literal=cluster-token=\$(openssl rand -hex 24) --from-literal=admin-key=e2b_\$(openssl rand -hex 20)"
  echo "#   P=\$(openssl rand -hex 16); kubectl -n space create secret generic space-postgresql --from-literal=password=\$P \\"
  echo "#     --from-literal=dsn=postgres://space:\$P@space-postgresql.space.svc:5432/space?sslmode=disable"
  echo "#   kubectl apply -n space -f deploy/kubernetes/space.yaml"
  HELM_CACHE_HOME=$(mktemp -d) HELM_CONFIG_HOME=$(mktemp -d) HELM_DATA_HOME=$(mktemp -d) \
    "$HELM" template space deploy/helm/space --namespace space --kube-version v1.37.2 \
    --set existingSecret=space-secrets --set postgresql.existingSecret=space-postgresql
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "==> wrote $out"
