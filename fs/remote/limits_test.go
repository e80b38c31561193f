package remote

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/featurefs/featurefs/fs/features"
)

// Dial and NewServer take their limits as given (featurefs passes its
// flags' values; mountopts holds the defaults): a zero limit is refused,
// naming it, not replaced by a second default; a zero MaxWait is no wait.
func TestLimitsAreTakenAsGiven(t *testing.T) {
	ts := startServer(t, map[string]string{"a.jpg": "image a"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, zero := range map[string]func(*ClientConfig){
		"Timeout":     func(c *ClientConfig) { c.Timeout = 0 },
		"MaxBatch":    func(c *ClientConfig) { c.MaxBatch = 0 },
		"MaxInFlight": func(c *ClientConfig) { c.MaxInFlight = 0 },
		"MaxWait":     func(c *ClientConfig) { c.MaxWait = -time.Millisecond },
	} {
		cfg := clientLimits(ClientConfig{URLs: []string{ts.URL}, Token: testToken})
		zero(&cfg)
		if c, err := Dial(ctx, cfg); err == nil || !strings.Contains(err.Error(), name) {
			if c != nil {
				c.Close()
			}
			t.Errorf("Dial with %s %+v: %v, want an error naming %s", name, cfg, err, name)
		}
	}
	cfg := clientLimits(ClientConfig{URLs: []string{ts.URL}, Token: testToken})
	cfg.MaxWait = 0
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial with MaxWait 0: %v", err)
	}
	defer c.Close()
	if c.cfg.MaxWait != 0 {
		t.Errorf("MaxWait 0 became %v", c.cfg.MaxWait)
	}

	for name, zero := range map[string]func(*ServerConfig){
		"MaxConcurrent":              func(c *ServerConfig) { c.MaxConcurrent = 0 },
		"MaxBatchItems":              func(c *ServerConfig) { c.MaxBatchItems = 0 },
		"MaxRequestBytes":            func(c *ServerConfig) { c.MaxRequestBytes = 0 },
		"Heartbeat":                  func(c *ServerConfig) { c.Heartbeat = 0 },
		"MaxBufferedBytes":           func(c *ServerConfig) { c.MaxBufferedBytes = 0 },
		"MaxBufferedBytesPerRequest": func(c *ServerConfig) { c.MaxBufferedBytesPerRequest = 0 },
		"WriteTimeout":               func(c *ServerConfig) { c.WriteTimeout = 0 },
		"BodyTimeout":                func(c *ServerConfig) { c.BodyTimeout = 0 },
	} {
		cfg := ts.cfg
		zero(&cfg)
		if s, err := NewServer(ts.Pipeline(), cfg); err == nil || !strings.Contains(err.Error(), name+" must be positive") {
			if s != nil {
				s.Close()
			}
			t.Errorf("NewServer with %s 0: %v, want an error naming it", name, err)
		}
	}
	// The items' bound is the pipeline's ReadTimeout (serve's
	// --item-timeout): none is refused, not replaced by a default.
	p, err := features.New(features.Config{Bucket: ts.Pipeline().Config().Bucket, Extractor: ts.Ex, Cache: newMemCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if s, err := NewServer(p, ts.cfg); err == nil || !strings.Contains(err.Error(), "ReadTimeout") {
		if s != nil {
			s.Close()
		}
		t.Errorf("NewServer over a pipeline without ReadTimeout: %v, want an error naming it", err)
	}
}
