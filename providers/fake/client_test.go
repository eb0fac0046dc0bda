package fake_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/fake"
)

// TestClientClassifiesEveryFailure points the Client at servers that answer
// the way a provider, a proxy or a broken network might.
func TestClientClassifiesEveryFailure(t *testing.T) {
	t.Parallel()
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		kind    providers.Kind
		code    string
		status  int // of the *fake.APIError, 0 when none
	}{
		{"DeclineIsDeclined", answer(402, `{"error":{"type":"card_error","code":"insufficient_funds","message":"no"}}`),
			providers.KindDeclined, providers.CodeInsufficientFunds, 402},
		{"KeyInUseIsNotExecuted", answer(409, `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use"}}`),
			providers.KindNotExecuted, providers.CodeIdempotencyKeyInUse, 409},
		{"TooManyRequestsIsNotExecuted", answer(429, ``),
			providers.KindNotExecuted, providers.CodeProviderUnavailable, 429},
		{"FakeUnavailableIsNotExecuted", answer(503, `{"error":{"type":"api_error","code":"provider_unavailable"}}`),
			providers.KindNotExecuted, providers.CodeProviderUnavailable, 503},
		{"Bare503IsUnknown", answer(503, `<html>upstream down</html>`),
			providers.KindUnknown, providers.CodeProviderInternalError, 503},
		{"InternalErrorIsUnknown", answer(500, `{"error":{"type":"api_error","code":"boom"}}`),
			providers.KindUnknown, providers.CodeProviderInternalError, 500},
		{"GatewayTimeoutIsUnknown", answer(504, ``),
			providers.KindUnknown, providers.CodeProviderTimeout, 504},
		{"StateConflictIsRejected", answer(400, `{"error":{"type":"invalid_request_error","code":"state_conflict"}}`),
			providers.KindRejected, providers.CodeStateConflict, 400},
		{"Bare404IsRejectedNotFound", answer(404, ``),
			providers.KindRejected, providers.CodeNotFound, 404},
		{"UndecodableSuccessIsUnknown", answer(200, `{"object":"hold",`),
			providers.KindUnknown, providers.CodeProviderInternalError, 0},
		{"RedirectIsUnknown", answer(304, ``),
			providers.KindUnknown, providers.CodeProviderInternalError, 304},
		{"ShortBodyIsUnknown", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "500")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"object":"hold","ref":"fh_`)
		}, providers.KindUnknown, providers.CodeProviderInternalError, 0},
		{"ResetMidAnswerIsUnknown", func(w http.ResponseWriter, r *http.Request) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"ob")
			_ = buf.Flush()
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST, not FIN
			}
			conn.Close()
		}, providers.KindUnknown, "", 0},
		{"DroppedBeforeAnswerIsUnknown", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			conn.Close()
		}, providers.KindUnknown, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			c := fake.NewClient(srv.URL, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}})
			_, err := c.Capture(t.Context(), providers.CaptureRequest{Key: "k", Ref: "fh_1"})
			wantKind(t, err, tc.kind, tc.code)
			var ae *fake.APIError
			if got := errors.As(err, &ae); got != (tc.status != 0) || (got && ae.StatusCode != tc.status) {
				t.Errorf("APIError in %v: %v, want status %d", err, ae, tc.status)
			}
		})
	}
}

func TestClientUnsentRequestIsNotExecuted(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // connection refused from now on

	c := fake.NewClient(url, nil)
	_, err = c.Authorize(t.Context(), authReq(t, 100))
	wantKind(t, err, providers.KindNotExecuted, providers.CodeProviderUnavailable)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = fake.NewClient("http://127.0.0.1:1", nil).Capture(ctx, providers.CaptureRequest{Key: "k", Ref: "fh_1"})
	wantKind(t, err, providers.KindNotExecuted, "")
}

func TestClientTimeoutAfterSendingIsUnknown(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		// The server notices a closed connection only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := fake.NewClient(srv.URL, nil).Cancel(ctx, providers.CancelRequest{Key: "k", Ref: "fh_1"})
	wantKind(t, err, providers.KindUnknown, providers.CodeProviderTimeout)
	select {
	case <-got:
	default:
		t.Fatal("the request never reached the server")
	}
}

func TestClientReportDetectsMissingRows(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		bw := bufio.NewWriter(w)
		_, _ = bw.WriteString(`{"object":"report_row","ref":"fh_1","status":"captured"}` + "\n")
		_, _ = bw.WriteString(`{"object":"report_end","rows":2}` + "\n")
		_ = bw.Flush()
	}))
	defer srv.Close()
	n := 0
	err := fake.NewClient(srv.URL, nil).Report(t.Context(), providers.ReportRequest{From: day, To: day.Add(time.Hour)},
		func(providers.ReportRow) error { n++; return nil })
	wantKind(t, err, providers.KindUnknown, "")
	if n != 1 {
		t.Errorf("fn saw %d rows, want 1", n)
	}
}
