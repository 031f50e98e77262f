//go:build tools

// Package tools pins the commands hack/substrates.sh builds.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
