package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// The functions below make a server that requires one kind of
// credentials (each returns the option setter for Run) and the files a
// client presents, written to a new t.TempDir().

// UserPassword makes a server require the user and password given.
func UserPassword(user, password string) func(*server.Options) {
	return func(o *server.Options) {
		o.Users = []*server.User{{Username: user, Password: password}}
	}
}

// Nkey makes a server require a user's nkey; seedFile holds the user's
// seed (as nats.NkeyOptionFromSeed reads it).
func Nkey(t testing.TB) (seedFile string, set func(*server.Options)) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile = writeFile(t, "user.nk", seed)
	return seedFile, func(o *server.Options) {
		o.Nkeys = []*server.NkeyUser{{Nkey: pub}}
	}
}

// Creds makes a server trust one operator (decentralized JWT
// authentication, as NGS or a nats-server with an operator runs it) with
// one account, JetStream on, and credsFile the credentials file of a user
// of that account (its JWT and seed, as nats.UserCredentials reads it).
func Creds(t testing.TB) (credsFile string, set func(*server.Options)) {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	skp, _ := nkeys.CreateAccount() // the system account the server needs
	akp, _ := nkeys.CreateAccount()
	ukp, _ := nkeys.CreateUser()
	opub, _ := okp.PublicKey()
	spub, _ := skp.PublicKey()
	apub, _ := akp.PublicKey()
	upub, _ := ukp.PublicKey()

	oc := jwt.NewOperatorClaims(opub)
	oc.SystemAccount = spub
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	credsFile = writeFile(t, "user.creds", creds)
	return credsFile, func(o *server.Options) {
		r := &server.MemAccResolver{}
		_ = r.Store(spub, sjwt) // a MemAccResolver's Store never fails
		_ = r.Store(apub, ajwt)
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver, o.SystemAccount = r, spub
	}
}

// TLSFiles are the PEM files of a TLS client: the CA that signed the
// server's certificate, and the client's certificate and key.
type TLSFiles struct {
	CA, Cert, Key string
}

// TLS makes a server speak TLS only, with a certificate for 127.0.0.1
// from a new throwaway CA, and require a client certificate from the
// same CA; files are the client's.
func TLS(t testing.TB) (files TLSFiles, set func(*server.Options)) {
	t.Helper()
	caKey, caCert, caDER := newCert(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "natstest CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	})
	srvKey, _, srvDER := newCert(t, caCert, caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	cliKey, _, cliDER := newCert(t, caCert, caKey, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "natstest client"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	files = TLSFiles{
		CA:   writePEM(t, "ca.pem", "CERTIFICATE", caDER),
		Cert: writePEM(t, "client.pem", "CERTIFICATE", cliDER),
		Key:  writePEM(t, "client-key.pem", "EC PRIVATE KEY", cliKey),
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: writePEM(t, "server.pem", "CERTIFICATE", srvDER),
		KeyFile:  writePEM(t, "server-key.pem", "EC PRIVATE KEY", srvKey),
		CaFile:   files.CA,
		Verify:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, func(o *server.Options) {
		o.TLS, o.TLSVerify, o.TLSConfig, o.TLSTimeout = true, true, tc, 5
	}
}

// newCert makes a key and a certificate for tmpl, signed by parent's key
// (self-signed when parent is nil); it returns the key, the certificate
// and the certificate's DER form.
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

// writePEM writes one PEM block of a DER certificate or an EC key.
func writePEM(t testing.TB, name, kind string, v any) string {
	t.Helper()
	var der []byte
	switch v := v.(type) {
	case []byte:
		der = v
	case *ecdsa.PrivateKey:
		var err error
		if der, err = x509.MarshalECPrivateKey(v); err != nil {
			t.Fatal(err)
		}
	}
	return writeFile(t, name, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}))
}

func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
