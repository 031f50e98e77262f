//go:build tools

// Package tools pins the command hack/substrates.sh builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
