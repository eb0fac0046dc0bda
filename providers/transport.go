package providers

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// TransportError classifies a failure to get or to read a provider's
// answer over HTTP: every adapter meets the same failures, and what they
// mean for the money does not depend on the provider. provider and op name
// the adapter and the operation in the message; sent reports whether a
// connection was obtained for the request (httptrace's GotConn), which is
// the line between the two classes:
//
//   - Not sent: the name did not resolve (DNS), the connection was refused
//     or could not be opened, the TLS handshake failed, or the context
//     ended while connecting. No byte of the request left this process, so
//     the provider cannot have acted: KindNotExecuted, safe to retry with
//     the same key. Code timeout when a deadline passed, else
//     provider_unavailable.
//   - Sent: a timeout waiting for the answer, a reset or closed connection,
//     an answer cut short or that does not parse. The provider may have
//     received and executed the request, only the answer was lost:
//     KindUnknown. The operation stays pending and is settled by a Lookup or
//     a retry with the same forwarded key, never by a new operation. Code
//     timeout when a deadline passed, else provider_error.
//
// Once a connection was obtained, even a refused connection is KindUnknown:
// net/http replays a request that carries an Idempotency-Key on a fresh
// connection when a reused one fails before the answer's first byte, so a
// refused redial can follow a request the provider already received.
//
// An adapter classifies the answers it did get (HTTP statuses, error
// bodies) itself; only failures without an answer come here.
func TransportError(provider, op string, err error, sent bool) *Error {
	timeout := isTimeout(err)
	if !sent {
		code := CodeProviderUnavailable
		if timeout {
			code = CodeProviderTimeout
		}
		return &Error{Kind: KindNotExecuted, Code: code,
			Message: fmt.Sprintf("%s %s: not sent: %v", provider, op, err), Err: err}
	}
	code := CodeProviderInternalError
	if timeout {
		code = CodeProviderTimeout
	}
	return &Error{Kind: KindUnknown, Code: code,
		Message: fmt.Sprintf("%s %s: no complete answer after sending: %v", provider, op, err), Err: err}
}

// isTimeout reports whether err is a deadline (the context's or the HTTP
// client's) or a network timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
