package reconcile

import (
	"strconv"
	"testing"

	"github.com/payorch/payorch/orchestrator"
)

// Every payment state but pending (judged apart: stuck_pending) has the
// provider state reconciliation expects of it.
func TestExpectedStatusCoversEveryPaymentState(t *testing.T) {
	t.Parallel()
	for _, st := range orchestrator.Statuses {
		if _, ok := expectedStatus[st]; ok == (st == orchestrator.StatusPending) {
			t.Errorf("expectedStatus[%s] present: %v", st, ok)
		}
	}
	if len(expectedStatus) != len(orchestrator.Statuses)-1 {
		t.Errorf("expectedStatus has %d states, want %d", len(expectedStatus), len(orchestrator.Statuses)-1)
	}
}

// The pairing cursor's FETCH reads the batch the loop expects: a shorter
// FETCH would end the day after its first page.
func TestFetchPairsReadsOneBatch(t *testing.T) {
	t.Parallel()
	if want := "FETCH " + strconv.Itoa(pairBatch) + " FROM pairs"; fetchPairsSQL != want {
		t.Fatalf("fetchPairsSQL = %q, want %q", fetchPairsSQL, want)
	}
}
