package cli

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// envMCPToken names the environment variable that holds mcp serve --http's
// bearer token, for a token kept out of files.
const envMCPToken = "SKULK_MCP_TOKEN"

// maxTokenFile bounds the bytes read of --token-file.
const maxTokenFile = 4 << 10

// ErrOpenBind: mcp serve --http was given an address other than loopback
// with neither a token nor client certificates configured.
var ErrOpenBind = errors.New("--http on an address other than loopback needs --token-file, " + envMCPToken + " or --tls-client-ca")

// httpGuard is who may reach mcp serve --http: a bearer token and TLS (with
// client certificates), either or both, or nothing on loopback.
type httpGuard struct {
	token string      // "" means none
	tls   *tls.Config // nil means plain HTTP
}

// verify is the go-sdk's token verifier: the token must equal the guard's
// (compared in constant time).
func (g *httpGuard) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if subtle.ConstantTimeCompare([]byte(token), []byte(g.token)) != 1 {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{}, nil
}

// httpGuard reads the token and the TLS files of o and refuses an address
// other than loopback that nothing guards.
func (o *mcpOptions) httpGuard() (*httpGuard, error) {
	g := &httpGuard{}
	switch {
	case o.tokenFile != "":
		f, err := os.Open(o.tokenFile)
		if err != nil {
			return nil, usageErr("--token-file: cannot open the file")
		}
		b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
		f.Close()
		if err != nil {
			return nil, usageErr("--token-file: cannot read the file")
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if len(line) > maxTokenFile {
			return nil, usageErr("--token-file: the token is longer than %d bytes", maxTokenFile)
		}
		if g.token = strings.TrimSpace(line); g.token == "" {
			return nil, usageErr("--token-file: the file's first line is empty")
		}
	case os.Getenv(envMCPToken) != "":
		if g.token = strings.TrimSpace(os.Getenv(envMCPToken)); g.token == "" {
			return nil, usageErr("%s: the token is blank", envMCPToken)
		}
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, usageErr("--tls-cert, --tls-key: cannot load the key pair: %v", err)
		}
		g.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if o.clientCA != "" {
			pem, err := os.ReadFile(o.clientCA)
			pool := x509.NewCertPool()
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				return nil, usageErr("--tls-client-ca: no PEM certificate in the file")
			}
			g.tls.ClientCAs, g.tls.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
	}
	if g.token == "" && (g.tls == nil || g.tls.ClientCAs == nil) && !loopbackAddr(o.http) {
		return nil, usageErr("%s", ErrOpenBind.Error())
	}
	return g, nil
}

// loopbackAddr reports whether the host of addr is a loopback address or
// localhost (an empty host listens on every address: not loopback).
func loopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
