//go:build tools

// Package helmtools names the helm command scripts/kube-tools.sh builds.
package helmtools

import _ "helm.sh/helm/v3/cmd/helm"
