// Package gpbench is the hashicorp/go-plugin side of the benchmarks: a gRPC
// service with a server-streaming, a bidirectional and a unary method, the
// plugin that serves it in a child process, and the client the driver uses.
//
// There is no protoc on the build machines, so the service is a hand-written
// grpc.ServiceDesc whose messages are raw bytes (*Msg) carried by Codec.
// Codec falls back to protobuf for every other message, so go-plugin's own
// services (health, broker, controller, stdio) keep working on the same
// server.
package gpbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// PluginName is the name the plugin is served and dispensed under.
const PluginName = "bench"

// MaxMsgSize is the gRPC message-size limit set on both sides: 16 MiB, the
// same as Skulk's default max_attachment. gRPC's default receive limit is
// 4 MiB; the 1 MiB media workload fits under it, so this raise changes no
// workload's figure, it only gives both systems the same ceiling.
const MaxMsgSize = 16 << 20

// Handshake is the go-plugin handshake shared by the child and the driver.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "SKULK_BENCH_PLUGIN",
	MagicCookieValue: "b6f0c3d2-skulk-bench",
}

// Msg is a raw-bytes gRPC message.
type Msg struct {
	// B is the message's bytes; Codec neither copies nor frames them.
	B []byte
}

// Codec marshals *Msg as its bytes and anything else as protobuf. Its name
// is "proto", so it speaks on go-plugin's connection without a new content
// subtype.
type Codec struct{}

// Name returns "proto".
func (Codec) Name() string { return "proto" }

// Marshal returns m.B for a *Msg, the protobuf encoding otherwise.
func (Codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *Msg:
		return m.B, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("gpbench: cannot marshal a %T", v)
}

// Unmarshal keeps data in a *Msg (gRPC hands the codec a fresh slice), or
// decodes protobuf.
func (Codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *Msg:
		m.B = data
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("gpbench: cannot unmarshal into a %T", v)
}

// ModeStream, the only stream request mode, makes the server send N
// messages of Size bytes.
const ModeStream byte = 1

// StreamRequest is the request of the Stream method.
type StreamRequest struct {
	// Mode is ModeStream.
	Mode byte
	// N is how many messages to send.
	N uint64
	// Size is each message's length in bytes.
	Size uint32
}

const streamRequestLen = 13

func (r StreamRequest) bytes() []byte {
	b := make([]byte, streamRequestLen)
	b[0] = r.Mode
	binary.BigEndian.PutUint64(b[1:], r.N)
	binary.BigEndian.PutUint32(b[9:], r.Size)
	return b
}

// errRequest is returned for a Stream request that is not 13 bytes, has an
// unknown mode or asks for more than MaxMsgSize per message (the codec
// sends a message's bytes as they are, so a message of MaxMsgSize fits).
var errRequest = errors.New("gpbench: malformed stream request")

func parseStreamRequest(b []byte) (StreamRequest, error) {
	if len(b) != streamRequestLen {
		return StreamRequest{}, errRequest
	}
	r := StreamRequest{Mode: b[0], N: binary.BigEndian.Uint64(b[1:]), Size: binary.BigEndian.Uint32(b[9:])}
	if r.Mode != ModeStream || r.Size > MaxMsgSize {
		return StreamRequest{}, errRequest
	}
	return r, nil
}

const serviceName = "skulkbench.Bench"

var streamDesc = grpc.StreamDesc{StreamName: "Stream", Handler: handleStream, ServerStreams: true}
var echoDesc = grpc.StreamDesc{StreamName: "Echo", Handler: handleEcho, ServerStreams: true, ClientStreams: true}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Call", Handler: handleCall}, {MethodName: "Nest", Handler: handleNest}},
	Streams:     []grpc.StreamDesc{streamDesc, echoDesc},
}

// hostServiceName is the service the host offers its plugin over the
// GRPCBroker: go-plugin's bidirectional calls, the peer of a Skulk
// child's calls through its host.
const hostServiceName = "skulkbench.Host"

var hostServiceDesc = grpc.ServiceDesc{
	ServiceName: hostServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Call", Handler: handleHostCall}},
}

// HostFunc is the host service's one method: it answers a request the
// plugin passes on from a Nest call.
type HostFunc func(ctx context.Context, b []byte) ([]byte, error)

// handleHostCall runs the HostFunc the service was registered with.
func handleHostCall(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var m Msg
	if err := dec(&m); err != nil {
		return nil, err
	}
	out, err := srv.(HostFunc)(ctx, m.B)
	if err != nil {
		return nil, err
	}
	return &Msg{B: out}, nil
}

// errNest is returned for a Nest request shorter than its broker id, and
// for a Nest reply shorter than its time.
var errNest = errors.New("gpbench: malformed nest request or reply")

// handleNest calls the host service whose broker id leads the request
// (4 bytes, big-endian) with the rest of the request, and returns its
// reply after 8 bytes (big-endian) of the nanoseconds that call took as
// the plugin saw it: a call from the plugin back into its host, made
// while the host's call waits.
func handleNest(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var m Msg
	if err := dec(&m); err != nil {
		return nil, err
	}
	if len(m.B) < 4 {
		return nil, errNest
	}
	cc, err := srv.(*server).hostConn(binary.BigEndian.Uint32(m.B))
	if err != nil {
		return nil, err
	}
	var out Msg
	t0 := time.Now()
	if err := cc.Invoke(ctx, "/"+hostServiceName+"/Call", &Msg{B: m.B[4:]}, &out, grpc.ForceCodec(Codec{})); err != nil {
		return nil, err
	}
	took := time.Since(t0)
	return &Msg{B: append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(out.B)), uint64(took)), out.B...)}, nil
}

// server is the plugin's side of the bench service: it keeps one
// connection per host service it was asked to call (dialed through the
// broker at the first call, reused after, as a Skulk child keeps its idle
// call connections).
type server struct {
	broker *plugin.GRPCBroker

	mu    sync.Mutex
	conns map[uint32]*grpc.ClientConn // at most one per broker id the host offers; closed with the broker
}

func (s *server) hostConn(id uint32) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cc := s.conns[id]; cc != nil {
		return cc, nil
	}
	cc, err := s.broker.Dial(id)
	if err != nil {
		return nil, err
	}
	s.conns[id] = cc
	return cc, nil
}

// handleStream sends what the request asks for: N messages of Size bytes.
func handleStream(_ any, ss grpc.ServerStream) error {
	var req Msg
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	r, err := parseStreamRequest(req.B)
	if err != nil {
		return err
	}
	for i := uint64(0); i < r.N; i++ {
		// A new message each time: gRPC may still hold the last one's
		// bytes after SendMsg returns, so they must not be reused.
		out := &Msg{B: make([]byte, r.Size)}
		if r.Size >= 8 {
			binary.LittleEndian.PutUint64(out.B, i)
		}
		if err := ss.SendMsg(out); err != nil {
			return err
		}
	}
	return nil
}

// handleEcho sends every message back until the client half-closes.
func handleEcho(_ any, ss grpc.ServerStream) error {
	for {
		var m Msg
		if err := ss.RecvMsg(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// handleCall returns its request.
func handleCall(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var m Msg
	if err := dec(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

// NewServer is go-plugin's ServeConfig.GRPCServer: a gRPC server with Codec
// and the MaxMsgSize limits.
func NewServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.ForceServerCodec(Codec{}),
		grpc.MaxRecvMsgSize(MaxMsgSize), grpc.MaxSendMsgSize(MaxMsgSize))
	return grpc.NewServer(opts...)
}

// DialOptions are the driver's go-plugin GRPCDialOptions: the MaxMsgSize
// limits.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize))}
}

// Plugin is the go-plugin plugin: it registers the service on the child's
// server and returns a *Client on the host.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// GRPCServer registers the bench service.
func (Plugin) GRPCServer(b *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, &server{broker: b, conns: map[uint32]*grpc.ClientConn{}})
	return nil
}

// GRPCClient returns a *Client on cc.
func (Plugin) GRPCClient(_ context.Context, b *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &Client{cc: cc, broker: b}, nil
}

// TCPEnv, set in gpchild's environment to a TCP address (127.0.0.1:0),
// makes it serve the service on that address with a plain gRPC server
// instead of as a go-plugin plugin, and print the address it listens on
// as its first line of output: the go-plugin-tcp system of the compare
// driver, gRPC over the network path a remote peer takes.
const TCPEnv = "GPCHILD_TCP"

// NewClient returns a *Client on cc (a connection made without go-plugin).
func NewClient(cc *grpc.ClientConn) *Client { return &Client{cc: cc} }

// Client calls the bench service. It is safe for concurrent use.
type Client struct {
	cc     *grpc.ClientConn
	broker *plugin.GRPCBroker
}

// ServeHost offers f to the plugin as a host service over the broker and
// returns the broker id a Nest call names it by. The service runs until
// the plugin client is killed (go-plugin closes the broker then).
func (c *Client) ServeHost(f HostFunc) uint32 {
	id := c.broker.NextId()
	go c.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server { // stopped by the broker's close
		s := NewServer(opts)
		s.RegisterService(&hostServiceDesc, f)
		return s
	})
	return id
}

// Nest makes one Nest call: the plugin calls the host service id with b
// and the host's reply comes back as the call's reply, with how long the
// plugin's call to the host service took as the plugin saw it.
func (c *Client) Nest(ctx context.Context, id uint32, b []byte) ([]byte, time.Duration, error) {
	req := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(req, id)
	var out Msg
	if err := c.cc.Invoke(ctx, "/"+serviceName+"/Nest", &Msg{B: append(req, b...)}, &out, grpc.ForceCodec(Codec{})); err != nil {
		return nil, 0, err
	}
	if len(out.B) < 8 {
		return nil, 0, errNest
	}
	return out.B[8:], time.Duration(binary.BigEndian.Uint64(out.B)), nil
}

// Stream starts a Stream call. The caller reads it with RecvMsg(*Msg) until
// io.EOF, or cancels ctx.
func (c *Client) Stream(ctx context.Context, r StreamRequest) (grpc.ClientStream, error) {
	s, err := c.cc.NewStream(ctx, &streamDesc, "/"+serviceName+"/Stream", grpc.ForceCodec(Codec{}))
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(&Msg{B: r.bytes()}); err != nil {
		return nil, err
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	return s, nil
}

// Echo starts an Echo call: every message sent comes back.
func (c *Client) Echo(ctx context.Context) (grpc.ClientStream, error) {
	return c.cc.NewStream(ctx, &echoDesc, "/"+serviceName+"/Echo", grpc.ForceCodec(Codec{}))
}

// Ping makes the health check go-plugin's GRPCClient.Ping makes (a
// grpc.health.v1 Check of the "plugin" service on the plugin's connection),
// bounded by ctx, which go-plugin's Ping is not.
func (c *Client) Ping(ctx context.Context) error {
	_, err := grpc_health_v1.NewHealthClient(c.cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err
}

// Call makes one unary call and returns its reply.
func (c *Client) Call(ctx context.Context, b []byte) ([]byte, error) {
	var out Msg
	if err := c.cc.Invoke(ctx, "/"+serviceName+"/Call", &Msg{B: b}, &out, grpc.ForceCodec(Codec{})); err != nil {
		return nil, err
	}
	return out.B, nil
}
