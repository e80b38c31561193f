package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Dial at a server that answers, but not as featurefs serve does, fails in
// one line matching ErrNotFeatureServer that names the URL and the status
// and leaves the body out (it used to carry a whole HTML page or S3 XML
// document). A proxy's 503 page means the server is away, not wrong.
func TestDialNotAFeatureServer(t *testing.T) {
	page := "<!DOCTYPE html>\n<html><body>\n" + strings.Repeat("<p>nothing here</p>\n", 500) + "</body></html>\n"
	xml := `<?xml version="1.0" encoding="UTF-8"?>` + "\n<Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>\n"
	for _, c := range []struct {
		name        string
		status      int
		contentType string
		body        string
		want        []string
		unavailable bool
	}{
		{"HTML 404", http.StatusNotFound, "text/html; charset=utf-8", page, []string{"HTTP 404", "text/html"}, false},
		{"HTML 200", http.StatusOK, "text/html", page, []string{"HTTP 200", "text/html"}, false},
		{"S3 XML 403", http.StatusForbidden, "application/xml", xml, []string{"HTTP 403", "application/xml"}, false},
		{"HTML 401", http.StatusUnauthorized, "text/html", page, []string{"HTTP 401"}, false},
		{"other JSON", http.StatusOK, "application/json", `{"hello": "world"}`, []string{"protocol version"}, false},
		{"proxy 503", http.StatusServiceUnavailable, "text/html", page, []string{"HTTP 503"}, true},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", c.contentType)
			w.WriteHeader(c.status)
			fmt.Fprint(w, c.body)
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := Dial(ctx, clientLimits(ClientConfig{URLs: []string{ts.URL}, Timeout: 5 * time.Second}))
		cancel()
		ts.Close()
		if err == nil {
			t.Errorf("%s: Dial succeeded", c.name)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || strings.Contains(msg, "<") || len(msg) > 300 {
			t.Errorf("%s: error is not one short line without the body: %q", c.name, msg)
		}
		for _, w := range append(c.want, ts.URL) {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q lacks %q", c.name, msg, w)
			}
		}
		if c.unavailable {
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFeatureServer) {
				t.Errorf("%s: %v, want ErrUnavailable (no server answers), not ErrNotFeatureServer", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotFeatureServer) || errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %v, want ErrNotFeatureServer", c.name, err)
		}
	}
}
