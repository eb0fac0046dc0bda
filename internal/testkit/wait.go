package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Poll calls cond until it reports true, sleeping between calls an
// interval that starts at a millisecond and doubles up to 50 ms: a
// condition that holds at once costs nothing, and a slow one is not read
// more than twenty times a second. cond's error does not stop the poll
// (the database may be down for a moment); the last one, which can also
// carry the state seen ("3 of 8 acknowledged"), is in the error Poll
// returns when cond has not held within timeout. For goroutines other
// than the test's, which must not call t.Fatal.
func Poll(timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for interval := time.Millisecond; ; interval = min(2*interval, 50*time.Millisecond) {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				return fmt.Errorf("not within %v", timeout)
			}
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		// The one sleep of the tests' waits: the poll's interval.
		time.Sleep(interval)
	}
}

// WaitFor polls cond as Poll does and fails t, naming what it waited for
// and cond's last error, when cond has not held within timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Until adapts a condition that has no error to WaitFor and Poll.
func Until(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}
