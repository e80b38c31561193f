package remote

import (
	"bytes"
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestTLSWithCAFile: a server behind TLS is reached with TLSConfig(caFile)
// trusting its certificate, and refused without it.
func TestTLSWithCAFile(t *testing.T) {
	plain := startServer(t, map[string]string{"t.jpg": "tls!"}, nil)
	ts := newTLSTestServer(t, plain.Server)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := TLSConfig(ca)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, ClientConfig{URLs: []string{ts.URL}, TLS: cfg})
	got, err := c.Extractor().Extract(context.Background(), featureReq("t.jpg", 0, ""))
	if err != nil || !bytes.Equal(got, expectedFeature([]byte("tls!"), 0)) {
		t.Fatalf("over TLS: %v", err)
	}
	untrusted, _ := TLSConfig("")
	if _, err := Dial(context.Background(), clientLimits(ClientConfig{URLs: []string{ts.URL}, Token: testToken, TLS: untrusted})); err == nil {
		t.Error("Dial trusted a certificate no CA vouches for")
	}
	if _, err := TLSConfig(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("TLSConfig accepted a missing CA file")
	}
}
