package testkit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := Poll(time.Minute, func() (bool, error) { calls++; return calls == 3, errors.New("not yet") })
	if err != nil || calls != 3 {
		t.Fatalf("Poll: %v after %d calls, want nil after 3", err, calls)
	}
}

func TestPollNamesTheLastErrorAtTheDeadline(t *testing.T) {
	calls := 0
	begin := time.Now()
	err := Poll(30*time.Millisecond, func() (bool, error) {
		calls++
		return false, errors.New("state " + strings.Repeat("x", calls))
	})
	if err == nil || !strings.HasSuffix(err.Error(), "state "+strings.Repeat("x", calls)) {
		t.Fatalf("Poll: %v, want the last of %d errors", err, calls)
	}
	if took := time.Since(begin); took < 30*time.Millisecond {
		t.Fatalf("Poll gave up after %v, before its timeout", took)
	}
}
