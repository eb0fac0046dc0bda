package stripe

import (
	"testing"
	"time"

	"github.com/payorch/payorch/providers"
	"github.com/payorch/payorch/providers/providertest"
)

// TestProvider runs the behaviour suite against the adapter and the
// Stripe-shaped emulator on loopback, over real HTTP, with every subtest
// sharing the one emulator.
func TestProvider(t *testing.T) {
	t.Parallel()
	e := newEmulator(t)
	c := e.client(t, 10*time.Second)
	providertest.Run(t, providertest.Harness{
		New: func(*testing.T) providers.Provider { return c },
		// The write that moves money hangs: for an authorization, its
		// confirmation.
		TimeoutAfterExecute: func(t *testing.T, op providertest.Op, key string) {
			if op == providertest.OpAuthorize {
				key += keyConfirm
			}
			e.arm(&emuFault{kind: faultHangAfterExecute, key: key})
		},
		// An authorization is two writes under derived keys (create, then
		// confirm) that together place one hold: it executed as often as
		// the more executed of the two.
		Executed: func(t *testing.T, key string) int {
			return e.executions(key) + max(e.executions(key+keyCreate), e.executions(key+keyConfirm))
		},
		UnknownRef: "pi_doesnotexist00000000000000",
	})
}
