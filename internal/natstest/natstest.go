// Package natstest runs real nats-server instances with JetStream inside a
// test process, for the tests of the JetStream call log store and of the
// CLI that uses it: one server, or a cluster of several on the loopback
// interface, each with its store in a directory the test owns; and
// servers that require credentials (an nkey, a creds file, TLS with a
// client certificate, a user and password), with the client's files.
// Only test files import it, so the nats-server module is linked into
// test binaries alone.
package natstest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds a server's start (and a cluster's election of a
// JetStream leader) on a loaded 2-core machine.
const readyTimeout = 30 * time.Second

// Server is one nats-server with JetStream on, listening on 127.0.0.1.
// It can be shut down and started again on the same port and store.
type Server struct {
	opts *server.Options
	srv  *server.Server
}

// URL is the server's client URL, nats://127.0.0.1:PORT (a server made
// with TLS is reached at tls://, Addr).
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// Name is the server's name (s1, s2, ...).
func (s *Server) Name() string { return s.opts.ServerName }

// Addr is the server's client address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.opts.Port) }

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Start starts the server (again), on its port, with its store; on its
// first start a server made with port server.RANDOM_PORT picks one.
func (s *Server) Start() error {
	if s.srv != nil {
		return errors.New("natstest: server running")
	}
	opts := *s.opts
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return errors.New("natstest: the server did not get ready")
	}
	if s.opts.Port == server.RANDOM_PORT { // its first start: keep the port for the next
		addr, ok := srv.Addr().(*net.TCPAddr)
		if !ok {
			srv.Shutdown()
			srv.WaitForShutdown()
			return errors.New("natstest: the server has no TCP address")
		}
		s.opts.Port = addr.Port
	}
	s.srv = srv
	return nil
}

// Run starts one JetStream server whose store is in a new t.TempDir(),
// shut down when the test ends. Each set function changes the server's
// options before it starts (limits, say).
func Run(t testing.TB, set ...func(*server.Options)) *Server {
	t.Helper()
	// The server picks its port (no window in which another process
	// could take a port chosen for it) and keeps it across restarts.
	s := &Server{opts: &server.Options{
		ServerName: "s1", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
	}}
	for _, f := range set {
		f(s.opts)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// RunCluster starts n JetStream servers routed to each other as one
// cluster, stores in t.TempDir(), and waits for a JetStream meta leader.
// They are shut down when the test ends. Each set function changes every
// server's options before it starts (limits, say).
func RunCluster(t testing.TB, n int, set ...func(*server.Options)) []*Server {
	t.Helper()
	ports := make([]int, 2*n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(ports[n+i])})
	}
	dir := t.TempDir()
	servers := make([]*Server, n)
	for i := range n {
		servers[i] = &Server{opts: &server.Options{
			ServerName: "s" + strconv.Itoa(i+1), Host: "127.0.0.1", Port: ports[i], NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: filepath.Join(dir, strconv.Itoa(i+1)),
			Cluster: server.ClusterOpts{Name: "skulk", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:  routes,
		}}
		for _, f := range set {
			f(servers[i].opts)
		}
	}
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
		opts := *s.opts
		srv, err := server.NewServer(&opts)
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		s.srv = srv
	}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range servers {
		if !s.srv.ReadyForConnections(time.Until(deadline)) {
			t.Fatal("natstest: a cluster server did not get ready")
		}
	}
	WaitLeader(t, servers)
	for _, s := range servers { // every peer known to the meta group
		for !s.srv.JetStreamIsCurrent() {
			if time.Now().After(deadline) {
				t.Fatal("natstest: a cluster server's JetStream is not current")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Every peer online in the meta leader's view: it places a stream's
	// replicas only on peers whose statistics it has received, and until
	// then refuses an R3 stream ("no suitable peers for placement").
	for !allPeersOnline(servers) {
		if time.Now().After(deadline) {
			t.Fatal("natstest: the meta leader does not see every cluster server online")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return servers
}

// allPeersOnline reports whether the running meta leader among servers
// sees all of them online, with JetStream and current statistics.
func allPeersOnline(servers []*Server) bool {
	for _, s := range servers {
		if s.srv != nil && s.srv.JetStreamIsLeader() {
			return len(s.srv.JetStreamClusterPeers()) == len(servers)
		}
	}
	return false
}

// WaitLeader waits until one of the running servers is the JetStream meta
// leader.
func WaitLeader(t testing.TB, servers []*Server) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		for _, s := range servers {
			if s.srv != nil && s.srv.JetStreamIsLeader() {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("natstest: no JetStream meta leader elected")
}

// freePort returns a TCP port on 127.0.0.1 nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("natstest: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
