package otelx

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestReading(t *testing.T) {
	reads, fail := 0, false
	r := &Reading[int]{Every: time.Hour, Timeout: time.Second, Read: func(ctx context.Context) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a read without the timeout")
		}
		reads++
		if fail {
			return 0, errors.New("down")
		}
		return reads, nil
	}}
	ctx := context.Background()
	if v, err := r.Get(ctx); v != 1 || err != nil {
		t.Fatalf("first get: %d %v", v, err)
	}
	if v, err := r.Get(ctx); v != 1 || err != nil || reads != 1 {
		t.Fatalf("within Every the kept value is used: %d %v after %d reads", v, err, reads)
	}
	r.Forget()
	fail = true
	if _, err := r.Get(ctx); err == nil || reads != 2 {
		t.Fatalf("after Forget a failing read: %v after %d reads", err, reads)
	}
	fail = false
	if v, err := r.Get(ctx); v != 3 || err != nil {
		t.Fatalf("a failed read is not kept: %d %v", v, err)
	}
	r.Every = 0
	if v, _ := r.Get(ctx); v != 4 {
		t.Fatalf("past Every it reads again: %d", v)
	}
}

func TestInstrumentsWithoutProviders(t *testing.T) {
	tr, m := Instruments("x", nil, nil)
	if tr == nil || m == nil {
		t.Fatal("nil providers must give no-op instruments")
	}
}
