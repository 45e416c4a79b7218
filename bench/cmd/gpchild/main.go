// Command gpchild is the hashicorp/go-plugin benchmark child: it serves the
// gpbench gRPC service as a go-plugin plugin. The compare driver starts it.
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/skulkrt/skulk/bench/internal/gpbench"
)

func main() {
	if addr := os.Getenv(gpbench.TCPEnv); addr != "" {
		os.Exit(serveTCP(addr))
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: gpbench.Handshake,
		Plugins:         plugin.PluginSet{gpbench.PluginName: gpbench.Plugin{}},
		GRPCServer:      gpbench.NewServer,
		Logger:          hclog.NewNullLogger(),
	})
}

// serveTCP serves the service on addr with a plain gRPC server (see
// gpbench.TCPEnv) until killed.
func serveTCP(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpchild:", err)
		return 1
	}
	s := gpbench.NewServer(nil)
	_ = gpbench.Plugin{}.GRPCServer(nil, s)
	fmt.Println(ln.Addr().String())
	if err := s.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "gpchild:", err)
		return 1
	}
	return 0
}
