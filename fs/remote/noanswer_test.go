package remote

import (
	"errors"
	"testing"
	"time"
)

// A silent server's error is ErrUnavailable (the client's routing tells
// failures from answers by it) and a timeout to the mount's classification.
func TestNoAnswerIsATimeout(t *testing.T) {
	err := noAnswer("http://s: no answer within", 30*time.Second)
	var to interface{ Timeout() bool }
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &to) || !to.Timeout() {
		t.Errorf("%v: ErrUnavailable %v, a timeout %v", err, errors.Is(err, ErrUnavailable), to != nil)
	}
	if want := "http://s: no answer within 30s: feature server unavailable"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
