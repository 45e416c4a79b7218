package natstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Proc is one nats-server process of a ProcCluster: a server that can be
// killed with SIGKILL, as a machine or a process is lost, which a server
// inside the test process cannot be (its Shutdown hands its leaderships
// over first).
type Proc struct {
	name string
	port int
	conf string
	bin  string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Name is the server's name (s1, s2, ...).
func (p *Proc) Name() string { return p.name }

// Addr is the server's client address, 127.0.0.1:PORT.
func (p *Proc) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// Kill sends the process SIGKILL and waits for it to exit.
func (p *Proc) Kill() { p.stop(syscall.SIGKILL) }

// Stop sends the process SIGTERM (the server shuts down cleanly, handing
// its leaderships over) and waits for it to exit.
func (p *Proc) Stop() { p.stop(syscall.SIGTERM) }

func (p *Proc) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.done
	p.cmd = nil
}

// Start starts the process (again) with its configuration and store.
func (p *Proc) Start() error {
	if p.cmd != nil {
		return fmt.Errorf("natstest: %s running", p.name)
	}
	cmd := exec.Command(p.bin, "-c", p.conf)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { // stopped by the process's exit (Kill, Stop, the test's cleanup)
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(readyTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natstest: %s did not listen", p.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ProcCluster starts n nats-server processes of the binary bin (built by
// the test, testnet.Build of github.com/nats-io/nats-server/v2) routed to
// each other as one JetStream cluster, stores in t.TempDir(), and waits
// until JetStream answers on every one. They are killed when the test
// ends.
func ProcCluster(t testing.TB, bin string, n int) []*Proc {
	t.Helper()
	ports := make([]int, 2*n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	var routes []string
	for i := range n {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[n+i]))
	}
	dir := t.TempDir()
	procs := make([]*Proc, n)
	for i := range n {
		name := "s" + strconv.Itoa(i+1)
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n"+
			"cluster { name: skulk, listen: 127.0.0.1:%d, routes: [%s] }\n",
			name, ports[i], filepath.Join(dir, name), ports[n+i], strings.Join(routes, ", "))
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = &Proc{name: name, port: ports[i], conf: path, bin: bin}
	}
	for _, p := range procs {
		t.Cleanup(p.Kill)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(readyTimeout)
	for _, p := range procs {
		for !jetStreamAnswers(p.Addr()) {
			if time.Now().After(deadline) {
				t.Fatalf("natstest: JetStream does not answer on %s", p.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return procs
}

// jetStreamAnswers reports whether the server at addr answers a JetStream
// account info request (the cluster has a meta leader).
func jetStreamAnswers(addr string) bool {
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	m, err := nc.Request("$JS.API.INFO", nil, time.Second)
	return err == nil && !strings.Contains(string(m.Data), `"error"`)
}
