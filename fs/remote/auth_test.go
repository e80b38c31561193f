package remote

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestAuthRefusesMissingAndWrongTokens: every /v1/ endpoint answers 401 with
// a WWW-Authenticate header without the token or with a wrong one, and 200
// with it; /healthz needs none; Dial with a wrong token fails with
// ErrUnauthorized; neither token ever reaches the server's log.
func TestAuthRefusesMissingAndWrongTokens(t *testing.T) {
	ts := startServer(t, map[string]string{"a/x.jpg": "hello"}, nil)
	const wrong = "wrong-token-that-must-not-be-logged"
	endpoints := []struct{ method, path, body string }{
		{"GET", "/v1/models", ""},
		{"GET", "/v1/list?prefix=a/", ""},
		{"GET", "/v1/stat?key=a/x.jpg", ""},
		{"GET", "/v1/feature?model=tiny&layer=0&key=a/x.jpg", ""},
		{"POST", "/v1/batch", `{"items":[{"model":"tiny","layer":0,"key":"a/x.jpg"}]}`},
		{"GET", "/v1/stats", ""},
		{"GET", "/v1/load", ""},
	}
	for _, e := range endpoints {
		for _, auth := range []string{"", "Bearer " + wrong, "Basic " + testToken, testToken, "Bearer " + testToken} {
			req, err := http.NewRequest(e.method, ts.URL+e.path, strings.NewReader(e.body))
			if err != nil {
				t.Fatal(err)
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := http.StatusUnauthorized
			if auth == "Bearer "+testToken {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s with Authorization %q: status %d, want %d", e.method, e.path, auth, resp.StatusCode, want)
			}
			if want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", e.method, e.path)
			}
		}
	}
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
	if got, want := ts.Stats().Unauthorized, int64(4*len(endpoints)); got != want {
		t.Errorf("server counted %d unauthorized requests, want %d", got, want)
	}

	_, err = Dial(context.Background(), clientLimits(ClientConfig{URLs: []string{ts.URL}, Token: wrong}))
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Dial with a wrong token: %v, want ErrUnauthorized", err)
	}
	if err != nil && strings.Contains(err.Error(), wrong) {
		t.Errorf("Dial's error shows the token: %v", err)
	}
	// A good client works, and its token is not logged either.
	c := dial(t, ClientConfig{URLs: []string{ts.URL}})
	if _, err := c.Extractor().Extract(context.Background(), featureReq("a/x.jpg", 0, "")); err != nil {
		t.Fatal(err)
	}
	logs := ts.Logs.String()
	if !strings.Contains(logs, "unauthorized request") {
		t.Errorf("refused requests were not logged:\n%s", logs)
	}
	for _, tok := range []string{testToken, wrong} {
		if strings.Contains(logs, tok) {
			t.Errorf("server log contains a token %q:\n%s", tok, logs)
		}
	}
}

// TestServerNeedsATokenOrNoAuth: a server without a token refuses to start
// unless NoAuth says so; with NoAuth it answers without a token.
func TestServerNeedsATokenOrNoAuth(t *testing.T) {
	ts := startServer(t, nil, nil)
	cfg := ts.cfg
	cfg.Token = ""
	if _, err := NewServer(ts.Pipeline(), cfg); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("NewServer without a token: %v", err)
	}
	cfg.NoAuth = true
	s, err := NewServer(ts.Pipeline(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "/v1/models", nil)
	rec := newRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Errorf("NoAuth server: GET /v1/models without a token: %d", rec.Code)
	}
	cfg.Token = testToken
	if _, err := NewServer(ts.Pipeline(), cfg); err == nil {
		t.Error("NewServer accepted a token together with NoAuth")
	}
}

// TestLoadToken: a token file's content, trimmed; an empty file is an error;
// no file falls back to $FEATUREFS_TOKEN.
func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/tok"
	os.WriteFile(p, []byte("  abc123\n"), 0o600)
	if tok, err := LoadToken(p); err != nil || tok != "abc123" {
		t.Errorf("LoadToken(file) = %q, %v", tok, err)
	}
	os.WriteFile(p, []byte("\n"), 0o600)
	if _, err := LoadToken(p); err == nil {
		t.Error("LoadToken accepted an empty token file")
	}
	if _, err := LoadToken(dir + "/missing"); err == nil {
		t.Error("LoadToken accepted a missing file")
	}
	t.Setenv(TokenEnv, " from-env ")
	if tok, err := LoadToken(""); err != nil || tok != "from-env" {
		t.Errorf("LoadToken(\"\") = %q, %v, want the variable's value", tok, err)
	}
}
