// Command gpchild is the hashicorp/go-plugin benchmark child: it serves the
// gpbench gRPC service as a go-plugin plugin. The compare driver starts it.
package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/skulkrt/skulk/bench/internal/gpbench"
)

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: gpbench.Handshake,
		Plugins:         plugin.PluginSet{gpbench.PluginName: gpbench.Plugin{}},
		GRPCServer:      gpbench.NewServer,
		Logger:          hclog.NewNullLogger(),
	})
}
