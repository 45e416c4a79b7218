package jetstreamstore

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// IsURL reports whether s names a JetStream store (nats:// or tls://)
// rather than a file.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "nats://") || strings.HasPrefix(s, "tls://")
}

// storeURL is a parsed store URL.
type storeURL struct {
	servers  []string
	stream   string
	replicas int
	maxAge   time.Duration
	maxBytes int64
	connect  []nats.Option
}

// parseURL parses scheme://HOST:PORT[,HOST:PORT...]/STREAM[?PARAMS] (see
// Open). Errors wrap ErrURL and name the part at fault, never echoing it.
func parseURL(raw string) (storeURL, error) {
	var u storeURL
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != "nats" && scheme != "tls") {
		return u, fmt.Errorf("%w: the scheme must be nats:// or tls://", ErrURL)
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, stream, ok := strings.Cut(rest, "/")
	if !ok || stream == "" {
		return u, fmt.Errorf("%w: the path must name the stream (nats://HOST:PORT/STREAM)", ErrURL)
	}
	if !validName(stream) {
		return u, fmt.Errorf("%w: the stream name must be letters, digits, '-' or '_'", ErrURL)
	}
	u.stream = stream
	for _, h := range strings.Split(hosts, ",") {
		if strings.Contains(h, "@") {
			return u, fmt.Errorf("%w: a user or password in the URL is refused; use a creds file (creds=FILE) or an nkey seed file", ErrURL)
		}
		if h == "" {
			return u, fmt.Errorf("%w: a server address is empty", ErrURL)
		}
		u.servers = append(u.servers, scheme+"://"+h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return u, fmt.Errorf("%w: the query cannot be parsed", ErrURL)
	}
	var cert, key string
	for name, vals := range q {
		v := vals[len(vals)-1]
		switch name {
		case "replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 5 {
				return u, fmt.Errorf("%w: replicas must be a whole number from 1 to 5", ErrURL)
			}
			u.replicas = n
		case "max_age":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return u, fmt.Errorf("%w: max_age must be a duration such as 24h", ErrURL)
			}
			u.maxAge = d
		case "max_bytes":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return u, fmt.Errorf("%w: max_bytes must be a whole number of bytes", ErrURL)
			}
			u.maxBytes = n
		case "creds":
			u.connect = append(u.connect, nats.UserCredentials(v))
		case "nkey":
			opt, err := nats.NkeyOptionFromSeed(v)
			if err != nil {
				return u, fmt.Errorf("%w: nkey: the seed file cannot be read: %w", ErrURL, err)
			}
			u.connect = append(u.connect, opt)
		case "tls_cert":
			cert = v
		case "tls_key":
			key = v
		case "tls_ca":
			u.connect = append(u.connect, nats.RootCAs(v))
		default:
			return u, fmt.Errorf("%w: unknown parameter (want replicas, max_age, max_bytes, creds, nkey, tls_cert, tls_key, tls_ca)", ErrURL)
		}
	}
	if (cert == "") != (key == "") {
		return u, fmt.Errorf("%w: tls_cert and tls_key go together", ErrURL)
	}
	if cert != "" {
		u.connect = append(u.connect, nats.ClientCert(cert, key))
	}
	return u, nil
}
