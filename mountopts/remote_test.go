package mountopts

import (
	"errors"
	"strings"
	"testing"
)

// TestRemoteOptions: --remote makes --model optional; bad URLs and bounds
// are reported naming their flag; serve options validate their own flags.
func TestRemoteOptions(t *testing.T) {
	o := Default()
	o.ORTLib = "/dev/null"
	if err := o.Validate(); !errors.Is(err, ErrNoModel) {
		t.Fatalf("no model, no remote: %v", err)
	}
	if err := o.Remote.SetURLs("http://a:7070, https://b:7443"); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("remote without --model: %v", err)
	}
	o.Remote.URLs = append(o.Remote.URLs, "ftp://c", "http://d:1/path")
	o.Remote.Timeout = 0
	o.Remote.MaxBatch = -1
	err := o.Validate()
	for _, want := range []string{`--remote "ftp://c"`, `--remote "http://d:1/path"`, "--remote-timeout", "--remote-max-batch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want a line about %s", err, want)
		}
	}
	if err := o.Remote.SetURLs(" , "); err == nil {
		t.Error("SetURLs accepted an empty list")
	}

	s := DefaultServe()
	if err := s.Validate(); err != nil {
		t.Errorf("default serve options: %v", err)
	}
	s.Listen, s.TLSCert, s.NoAuth, s.TokenFile = "nohost", "cert.pem", true, "/nonexistent"
	s.MaxConns, s.MaxConnsPerPeer, s.WriteTimeout, s.MaxBufferedBytesPerRequest = -1, 0, 0, 2*s.MaxBufferedBytes
	err = s.Validate()
	for _, want := range []string{"--listen", "--tls-cert and --tls-key", "--no-auth and --token-file", "--token-file /nonexistent",
		"--max-conns -1", "--max-conns-per-peer 0", "--write-timeout 0s", "--max-buffered-bytes-per-request 512MiB"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve Validate: %v, want a line about %s", err, want)
		}
	}
}
