package providers_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/payorch/payorch/providers"
)

// TestTransportError is the table of failures without an answer, as any
// adapter over HTTP meets them, and what each means for the money.
func TestTransportError(t *testing.T) {
	t.Parallel()
	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "https://provider.test/v1/x", Err: err} }
	dial := func(err error) error { return urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: err}) }
	refused := dial(os.NewSyscallError("connect", syscall.ECONNREFUSED))

	for _, tc := range []struct {
		name string
		err  error
		sent bool
		kind providers.Kind
		code string
	}{
		// Nothing left this process: the provider cannot have acted.
		{"ConnectionRefused", refused, false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"DNSFailure", urlErr(&net.DNSError{Err: "no such host", Name: "provider.test", IsNotFound: true}), false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"TLSHandshakeFailure", urlErr(&net.OpError{Op: "remote error", Net: "tcp", Err: tls.AlertError(40)}), false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		{"DialTimeout", dial(timeoutError{}), false, providers.KindNotExecuted, providers.CodeProviderTimeout},
		{"DeadlineWhileConnecting", urlErr(context.DeadlineExceeded), false, providers.KindNotExecuted, providers.CodeProviderTimeout},
		{"CanceledWhileConnecting", urlErr(context.Canceled), false, providers.KindNotExecuted, providers.CodeProviderUnavailable},
		// Sent: the provider may have acted, only the answer is missing.
		{"DeadlineAfterSending", urlErr(context.DeadlineExceeded), true, providers.KindUnknown, providers.CodeProviderTimeout},
		{"ClientTimeoutAfterSending", urlErr(timeoutError{}), true, providers.KindUnknown, providers.CodeProviderTimeout},
		{"ResetAfterSending", urlErr(syscall.ECONNRESET), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"CanceledAfterSending", urlErr(context.Canceled), true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"CutAnswer", io.ErrUnexpectedEOF, true, providers.KindUnknown, providers.CodeProviderInternalError},
		{"UnparsableAnswer", errors.New("undecodable answer: invalid character '<'"), true, providers.KindUnknown, providers.CodeProviderInternalError},
		// net/http may have replayed the request on a fresh connection.
		{"RefusedRedialAfterAConnection", refused, true, providers.KindUnknown, providers.CodeProviderInternalError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := providers.TransportError("acme", "capture", tc.err, tc.sent)
			if got.Kind != tc.kind || got.Code != tc.code {
				t.Fatalf("TransportError(%v, sent %t) = %s %q, want %s %q", tc.err, tc.sent, got.Kind, got.Code, tc.kind, tc.code)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("TransportError(%v) does not wrap the cause", tc.err)
			}
			if !strings.HasPrefix(got.Message, "acme capture: ") {
				t.Errorf("message %q does not name the provider and the operation", got.Message)
			}
		})
	}
}

// timeoutError is a net.Error that timed out (as http.Client's Timeout).
type timeoutError struct{}

func (timeoutError) Error() string   { return "Client.Timeout exceeded while awaiting headers" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
