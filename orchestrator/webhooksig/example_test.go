package webhooksig_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// A merchant's webhook handler: read the raw body (bounded), verify it
// against the endpoint's secret, deduplicate on the event id, then act.
// The end of the example plays payorch's part and sends one delivery.
func Example_verify() {
	// The endpoint's signing secret as payorch showed it, whole; in real
	// code, read it from your configuration.
	secret := "whsec_example_not_a_real_secret"

	handler := func(w http.ResponseWriter, r *http.Request) {
		// The raw bytes: verify before decoding any JSON.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		err = webhooksig.Verify(r.Header.Get(webhooksig.Header), body, secret,
			webhooksig.DefaultTolerance, time.Now())
		if err != nil {
			// errors.Is(err, webhooksig.ErrTimestampOutOfTolerance) and the
			// others tell why, for your logs.
			http.Error(w, "invalid signature", http.StatusBadRequest)
			return
		}
		// Delivery is at least once: skip an event id already handled.
		eventID := r.Header.Get(webhooksig.EventIDHeader)
		fmt.Printf("verified %s: %s\n", eventID, body)
		w.WriteHeader(http.StatusNoContent)
	}

	// payorch's side: one signed delivery.
	body := []byte(`{"id":"evt_123","type":"payment.captured"}`)
	req := httptest.NewRequest(http.MethodPost, "/webhooks/payorch", bytes.NewReader(body))
	req.Header.Set(webhooksig.Header, webhooksig.Sign([]string{secret}, time.Now(), body))
	req.Header.Set(webhooksig.EventIDHeader, "evt_123")
	rec := httptest.NewRecorder()
	handler(rec, req)
	fmt.Println(rec.Code)

	// The same delivery with its body altered on the way.
	req = httptest.NewRequest(http.MethodPost, "/webhooks/payorch", bytes.NewReader([]byte(`{"id":"evt_123","type":"payment.refunded"}`)))
	req.Header.Set(webhooksig.Header, webhooksig.Sign([]string{secret}, time.Now(), body))
	rec = httptest.NewRecorder()
	handler(rec, req)
	fmt.Println(rec.Code)

	// Output:
	// verified evt_123: {"id":"evt_123","type":"payment.captured"}
	// 204
	// 400
}

// The header for a fixed secret, time and body: the test vector that
// openssl reproduces with
//
//	printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac 'whsec_test'
func ExampleSign() {
	fmt.Println(webhooksig.Sign([]string{"whsec_test"}, time.Unix(1700000000, 0), []byte(`{"a":1}`)))
	// Output:
	// t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789
}
