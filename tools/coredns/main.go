// Command coredns is CoreDNS with only the plugins the test cluster's DNS
// needs. The upstream main links every plugin (cloud DNS providers
// included), which doubles the build on this 2-core machine for nothing; a
// trimmed directive list is CoreDNS's documented way to build a smaller server.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order matters: it is the order plugins see a query, as in upstream's
// plugin.cfg (a subset of it, same relative order).
func init() {
	dnsserver.Directives = []string{
		"reload",
		"bind",
		"ready",
		"health",
		"errors",
		"log",
		"cache",
		"hosts",
		"kubernetes",
		"loop",
		"forward",
	}
}

func main() { coremain.Run() }
