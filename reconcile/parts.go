package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/providers"
)

// Reconciliation of a flexible hold part by part. A provider that reports
// a hold's increments and captures one by one (providers.ReportRow.Parts;
// the fake does, Stripe's adapter reports totals only) has them staged
// with the row (reconciliation_provider_rows.parts, migration 00026), and
// each is compared with our increments and captures of the payment,
// matched by the forwarded key the provider reports for it:
//
//   - a part that matches none of our succeeded operations is
//     unknown_at_payorch (an increment or a capture made at the provider
//     that we never made, or one we recorded failed, or a second copy of
//     one we made once);
//   - a succeeded operation of ours that no part matches is
//     missing_at_provider;
//   - a part whose amount is not our operation's (a capture's amount, an
//     increment's new total) is amount_differs.
//
// Each is a part_mismatch about the payment. The totals are compared as
// before (amount_mismatch): a lost part usually shows in both, which says
// which part when the totals alone cannot. An operation whose outcome we
// do not know yet (pending: the resolver settles it by lookup) is judged
// on neither side. A provider row without parts (nil) is judged on its
// totals only: that provider does not report them, or, for the fake, the
// hold has none.

// PartMismatch: an increment or a capture of a flexible hold that the
// provider's record and ours do not agree on (parts.go).
const PartMismatch = "part_mismatch"

// The reasons of a part_mismatch (detail.reason).
const (
	partUnknownAtPayorch  = "unknown_at_payorch"
	partMissingAtProvider = "missing_at_provider"
	partAmountDiffers     = "amount_differs"
)

// part is one increment or capture of a provider row as staged (jsonb):
// Key is the forwarded key of the request that made it ("" when the
// provider does not say).
type part struct {
	Kind        string    `json:"kind"`
	AmountMinor int64     `json:"amount_minor"`
	Key         string    `json:"key,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// stagedParts is row's parts as staged: nil (NULL) when the provider
// reports none, else a JSON array (checkParts has vetted them).
func stagedParts(row providers.ReportRow) (any, error) {
	if row.Parts == nil {
		return nil, nil
	}
	out := make([]part, len(row.Parts))
	for i, p := range row.Parts {
		out[i] = part{Kind: p.Kind, AmountMinor: p.AmountMinor, Key: p.IdempotencyKey, CreatedAt: p.CreatedAt.UTC()}
	}
	return json.Marshal(out)
}

// maxParts bounds the parts of one provider row: a hold is raised and
// captured a handful of times, and a row with more is not compared.
const maxParts = 1000

// checkParts reports the first problem of parts that keeps them from
// being stored or compared (stage then stages the row without them).
func checkParts(parts []providers.ReportPart) (rowProblem, bool) {
	if len(parts) > maxParts {
		return rowProblem{field: "parts", expected: fmt.Sprintf("at most %d parts", maxParts),
			reason: fmt.Sprintf("%d parts", len(parts)), actual: itoa(int64(len(parts)))}, false
	}
	for i, p := range parts {
		bad := func(expected, reason, actual string) (rowProblem, bool) {
			return rowProblem{field: "parts", expected: expected, reason: fmt.Sprintf("part %d: %s", i+1, reason),
				actual: actual}, false
		}
		switch {
		case p.Kind != providers.PartIncrement && p.Kind != providers.PartCapture:
			return bad("parts of kind increment or capture", "unknown kind", printable(p.Kind))
		case p.AmountMinor < 0:
			return bad("an amount of 0 or more", "negative amount", itoa(p.AmountMinor))
		case !utf8.ValidString(p.IdempotencyKey):
			return bad("UTF-8 text without NUL bytes", "key not valid UTF-8", printable(p.IdempotencyKey))
		case strings.IndexByte(p.IdempotencyKey, 0) >= 0:
			return bad("UTF-8 text without NUL bytes", "key contains a NUL byte", printable(p.IdempotencyKey))
		case len(p.IdempotencyKey) > maxRefLen:
			return bad(fmt.Sprintf("a key of at most %d bytes", maxRefLen),
				fmt.Sprintf("key %d bytes long", len(p.IdempotencyKey)), printable(p.IdempotencyKey))
		}
		// A provider may not say when a part was made (zero): only a time
		// it does give must be one.
		if y := p.CreatedAt.UTC().Year(); !p.CreatedAt.IsZero() && (y < minRowYear || y > maxRowYear) {
			return bad(fmt.Sprintf("a time from %d to %d", minRowYear, maxRowYear), "time out of range",
				p.CreatedAt.UTC().Format(time.RFC3339))
		}
	}
	return rowProblem{}, true
}

// ourPart is one of our increments or captures of a payment.
type ourPart struct {
	ID, Kind, Key, Status string
	AmountMinor           int64
}

// ourPartsSQL reads the increments and captures of the payments of the
// keys ($1 tenants, $2 ids), each payment's in the order they were made.
// Each key is looked up on its own in payment_operations_payment_idx,
// whatever the planner guesses of the number of keys: left to itself it
// hash-joins them with every operation, reading the whole history once
// per batch of pairs. OFFSET 0 keeps the LATERAL subquery from being
// flattened into that join.
const ourPartsSQL = `
	SELECT k.tenant_id, k.id, o.id, o.kind, o.forwarded_key, o.status, o.amount_minor
	FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS k (tenant_id, id, n)
	CROSS JOIN LATERAL (
		SELECT id, kind, forwarded_key, status, amount_minor, created_at FROM payment_operations
		WHERE tenant_id = k.tenant_id AND payment_id = k.id AND kind IN ('increment', 'capture')
		OFFSET 0
	) o
	ORDER BY k.n, o.created_at, o.id`

// readOurParts reads on q the increments and captures of the payments of
// keys.
func readOurParts(ctx context.Context, q querier, keys []paymentKey) (map[paymentKey][]ourPart, error) {
	tenants, ids := make([]int64, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], ids[i] = k.tenant, k.id
	}
	rows, _ := q.Query(ctx, ourPartsSQL, tenants, ids)
	out := make(map[paymentKey][]ourPart, len(keys))
	var (
		k  paymentKey
		op ourPart
	)
	_, err := pgx.ForEachRow(rows, []any{&k.tenant, &k.id, &op.ID, &op.Kind, &op.Key, &op.Status, &op.AmountMinor}, func() error {
		out[k] = append(out[k], op)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read increments and captures: %w", err)
	}
	return out, nil
}

// partsLookup holds our increments and captures of the payments of the
// pairs read so far whose provider row reports parts, until each
// payment's group is judged.
type partsLookup map[paymentKey][]ourPart

// need reads (with read, once for the batch) the increments and captures
// of the payments of batch whose provider rows report parts and that it
// does not hold yet.
func (o partsLookup) need(ctx context.Context, batch []pairRow,
	read func(context.Context, []paymentKey) (map[paymentKey][]ourPart, error)) error {
	var keys []paymentKey
	for _, p := range batch {
		if p.l == nil || p.r == nil || p.r.Parts == nil {
			continue
		}
		k := paymentKey{p.l.TenantID, p.l.ID}
		if _, ok := o[k]; !ok {
			o[k] = nil
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	found, err := read(ctx, keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		o[k] = found[k]
	}
	return nil
}

// take returns the increments and captures of l's payment and forgets
// them (its group is being judged).
func (o partsLookup) take(l *local) []ourPart {
	if l == nil {
		return nil
	}
	k := paymentKey{l.TenantID, l.ID}
	ops := o[k]
	delete(o, k)
	return ops
}

// partMismatches compares the parts of a payment's provider row with our
// increments and captures of it (ops, in the order they were made): a
// part is matched to the first operation of its kind and forwarded key
// not matched yet; parts the provider reports without a key, to our
// succeeded operations of their kind without one (made at the provider
// and learned from its webhook), in order.
func partMismatches(l *local, parts []part, ops []ourPart) []finding {
	var out []finding
	used := make([]bool, len(ops))
	copies := map[string]int{}
	for _, p := range parts {
		i := -1
		for j, op := range ops {
			if !used[j] && op.Kind == p.Kind && op.Key == p.Key && (p.Key != "" || op.Status == "succeeded") {
				i = j
				break
			}
		}
		subject := l.ID + ":" + p.Kind + ":" + p.Key
		if p.Key == "" {
			subject += "@" + p.CreatedAt.UTC().Format(time.RFC3339Nano)
		}
		if copies[subject]++; copies[subject] > 1 {
			subject += ":" + itoa(int64(copies[subject]))
		}
		if i < 0 {
			out = append(out, l.partFinding(p.Kind, partUnknownAtPayorch, p.Key, subject, nil, &p.AmountMinor, nil))
			continue
		}
		used[i] = true
		switch op := ops[i]; {
		case op.Status == "failed": // we recorded it declined; the provider made it
			f := l.partFinding(p.Kind, partUnknownAtPayorch, p.Key, subject, nil, &p.AmountMinor, &op)
			f.Detail["operation_status"] = op.Status
			out = append(out, f)
		case op.Status == "succeeded" && op.AmountMinor != p.AmountMinor:
			out = append(out, l.partFinding(p.Kind, partAmountDiffers, p.Key, subject, &op.AmountMinor, &p.AmountMinor, &op))
		}
	}
	for i, op := range ops {
		if used[i] || op.Status != "succeeded" {
			continue
		}
		subject := l.ID + ":" + op.Kind + ":" + op.Key
		if op.Key == "" {
			subject = l.ID + ":" + op.Kind + ":op:" + op.ID
		}
		out = append(out, l.partFinding(op.Kind, partMissingAtProvider, op.Key, subject, &op.AmountMinor, nil, &op))
	}
	return out
}

// partFinding is the part_mismatch of one part of kind of l's hold:
// expected is our amount, actual the provider's (nil: absent); op is our
// operation, when there is one.
func (l *local) partFinding(kind, reason, key, subject string, expected, actual *int64, op *ourPart) finding {
	show := func(v *int64) string {
		if v == nil {
			return "absent"
		}
		return itoa(*v)
	}
	f := l.finding(PartMismatch, kind, show(expected), show(actual))
	f.subject = subject
	f.Detail["part"] = kind
	f.Detail["reason"] = reason
	f.Detail["forwarded_key"] = key
	f.Detail["expected"] = expected
	f.Detail["actual"] = actual
	if op != nil {
		f.Detail["operation_id"] = op.ID
	}
	// A capture's amount is money: the difference is how much more the
	// provider captured (an absent capture counting 0). An increment's is
	// a new total: a difference only when both sides have one.
	if kind == providers.PartCapture || (expected != nil && actual != nil) {
		var e, a int64
		if expected != nil {
			e = *expected
		}
		if actual != nil {
			a = *actual
		}
		d := a - e
		f.Difference = &d
	}
	return f
}
