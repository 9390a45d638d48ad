package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-go/sluice/admin"
)

// mTLS as admin.WithTLSClients wants it, with the files an operator has.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	ca.write(t, filepath.Join(dir, "ca.pem"))
	server := ca.issue(t, x509.ExtKeyUsageServerAuth, nil, []net.IP{net.ParseIP("127.0.0.1")})
	ca.issue(t, x509.ExtKeyUsageClientAuth, []string{"ops.example.com"}, nil).write(t, dir, "ops")
	ca.issue(t, x509.ExtKeyUsageClientAuth, []string{"intruder.example.com"}, nil).write(t, dir, "intruder")

	srvCreds := grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{server.pair()},
		ClientCAs:    ca.pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven, // so that a caller without one reaches the service and is told
	}))
	// The test's own client, for the call that creates a limiter.
	ownClient := credentials.NewTLS(&tls.Config{RootCAs: ca.pool()})
	s := serveTLS(t, listen(t), 5, srvCreds, ownClient, admin.WithTLSClients("ops.example.com"))
	file := func(name string) string { return filepath.Join(dir, name) }

	out, err := sluicectl(t, "list", "-cacert", file("ca.pem"), "-cert", file("ops.pem"), "-key", file("ops-key.pem"), s.target)
	require.NoError(t, err)
	assert.Contains(t, out, unary)

	_, err = sluicectl(t, "list", "-cacert", file("ca.pem"), "-cert", file("intruder.pem"), "-key", file("intruder-key.pem"), s.target)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "PERMISSION_DENIED: this client is not authorized by the server's admin.WithAuthorizer")
	assert.Contains(t, err.Error(), `client certificate "CN=intruder.example.com" has none of the names WithTLSClients admits`)

	_, err = sluicectl(t, "list", "-cacert", file("ca.pem"), s.target)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "UNAUTHENTICATED: the server at "+s.target+" wants to know who this client is: connect with -cert and -key")

	_, err = sluicectl(t, "list", "-cert", file("ops.pem"), "-key", file("ops-key.pem"), s.target)
	require.Error(t, err, "the system's CAs do not know the test CA")
	assert.Contains(t, err.Error(), "TLS failed: for a server without TLS use -plaintext; for one with TLS check -cacert and -servername")

	_, err = sluicectl(t, "list", "-cacert", file("ops-key.pem"), s.target)
	assert.EqualError(t, err, "-cacert "+file("ops-key.pem")+": no PEM certificate in it")
}

// ca is a throwaway certificate authority.
type ca struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
}

func newCA(t *testing.T) *ca {
	t.Helper()
	c := &ca{}
	c.cert, c.key = c.sign(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "test CA"},
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	})
	return c
}

// sign signs tmpl with the CA's key, or by itself when the CA has none.
func (c *ca) sign(t *testing.T, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	c.serial++
	tmpl.SerialNumber = big.NewInt(c.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if c.cert != nil {
		parent, signer = c.cert, c.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func (c *ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

func (c *ca) write(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}), 0o600))
}

type issued struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func (c *ca) issue(t *testing.T, use x509.ExtKeyUsage, dns []string, ips []net.IP) issued {
	t.Helper()
	cn := "server"
	if len(dns) > 0 {
		cn = dns[0]
	}
	cert, key := c.sign(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{use},
		DNSNames:    dns,
		IPAddresses: ips,
	})
	return issued{cert, key}
}

func (i issued) pair() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{i.cert.Raw}, PrivateKey: i.key, Leaf: i.cert}
}

// write writes dir/name.pem and dir/name-key.pem.
func (i issued) write(t *testing.T, dir, name string) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(i.key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.cert.Raw}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600))
}
