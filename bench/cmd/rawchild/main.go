// Command rawchild is the raw-socket baseline child: it dials the Unix
// socket named by its only argument and serves rawbench commands on it.
package main

import (
	"fmt"
	"net"
	"os"

	"github.com/skulkrt/skulk/bench/internal/rawbench"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rawchild SOCKET")
		os.Exit(2)
	}
	conn, err := net.Dial("unix", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawchild:", err)
		os.Exit(1)
	}
	err = rawbench.Serve(conn)
	conn.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawchild:", err)
		os.Exit(1)
	}
}
