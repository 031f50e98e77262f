//go:build tools

// Package tools pins the commands hack/substrates.sh builds.
package tools

import (
	_ "github.com/kcp-dev/kcp/cmd/cache-server"
	_ "github.com/kcp-dev/kcp/cmd/kcp"
	_ "github.com/kcp-dev/kcp/cmd/kcp-front-proxy"
	_ "github.com/kcp-dev/kcp/cmd/sharded-test-server"
)
