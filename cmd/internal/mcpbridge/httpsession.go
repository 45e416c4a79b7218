package mcpbridge

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Protocol versions the HTTP side of the server tells apart.
const (
	// versionPolling is the first protocol version with priming events
	// and a server that closes a request's stream with a retry hint
	// (SSE polling, SEP-1699).
	versionPolling = "2025-11-25"
	// versionStateless is the first protocol version without sessions,
	// initialize or Last-Event-ID resumption; a server with sessions, as
	// this one is, does not serve it.
	versionStateless = "2026-07-28"
)

// headerProtocolVersion is the HTTP header that names a request's MCP
// protocol version.
const headerProtocolVersion = "Mcp-Protocol-Version"

// recordVersion is a receiving middleware that keeps the protocol version
// each session negotiated at initialize, for sessionVersionHTTP.
func (s *Server) recordVersion(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		r, err := next(ctx, method, req)
		if method != "initialize" || err != nil {
			return r, err
		}
		res, ok := r.(*mcp.InitializeResult)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if !ok || ss == nil || ss.ID() == "" {
			return r, err
		}
		open := map[string]bool{}
		for o := range s.srv.Sessions() {
			open[o.ID()] = true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for id := range s.versions { // drop the entries of sessions that ended
			if !open[id] {
				delete(s.versions, id)
			}
		}
		s.versions[ss.ID()] = res.ProtocolVersion
		return r, err
	}
}

// sessionVersion is the protocol version session negotiated, "" when it
// is unknown (no such session, or not initialized yet).
func (s *Server) sessionVersion(session string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[session]
}

// sessionVersionHTTP serves each request of a session at the protocol
// version the session negotiated at initialize, as MCP lets a server do
// (a server may rely on the negotiated version): a request whose
// Mcp-Protocol-Version header is absent or names an older version the
// server supports is served as if it named the negotiated one. The go-sdk
// reads the version of a request from its header alone and serves an
// absent one as 2025-03-26, so a client that sends no header, or an old
// one, on a 2025-11-25 session would lose what its session has (priming
// events, SSE polling). A header naming a newer version, or one the
// server does not support, is left for the go-sdk to judge.
type sessionVersionHTTP struct {
	next http.Handler
	s    *Server
}

func (h sessionVersionHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	session := r.Header.Get("Mcp-Session-Id")
	if session == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	v := h.s.sessionVersion(session)
	got := r.Header.Get(headerProtocolVersion)
	if v != "" && got != v && (got == "" || got < v && slices.Contains(mcp.SupportedProtocolVersions(), got)) {
		r = r.Clone(r.Context())
		r.Header.Set(headerProtocolVersion, v)
	}
	h.next.ServeHTTP(w, r)
}

// ssePoll is a receiving middleware that closes the SSE stream of a
// request still running after ServerOptions.SSEPoll, with a retry hint of
// the same duration, so that a long call does not hold its POST open: the
// client comes back with Last-Event-ID and gets the rest of the stream,
// the response among it, from the event store (SSE polling, SEP-1699).
// It acts on requests over streamable HTTP at protocol versions from
// 2025-11-25 (whose streams open with a priming event, so a client always
// has an event id to resume from) and before 2026-07-28 (which has no
// resumption); others pass untouched.
func (s *Server) ssePoll(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		extra := req.GetExtra()
		if extra == nil || extra.CloseSSEStream == nil || extra.Header == nil {
			return next(ctx, method, req)
		}
		if v := extra.Header.Get(headerProtocolVersion); v < versionPolling || v >= versionStateless {
			return next(ctx, method, req)
		}
		// The close must not come after the response: the go-sdk finds
		// the stream by request id, which a later request may reuse. The
		// response is written after this handler returns, which waits
		// for a close already under way.
		fired := make(chan struct{})
		t := time.AfterFunc(s.opts.SSEPoll, func() { // stopped, or waited for, when the request is answered (below)
			defer close(fired)
			extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: s.opts.SSEPoll})
		})
		defer func() {
			if !t.Stop() {
				<-fired
			}
		}()
		return next(ctx, method, req)
	}
}
