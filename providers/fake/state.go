package fake

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/payorch/payorch/providers"
)

// stateVersion is the version of the state file's format.
const stateVersion = 1

// stateDoc is the state file: everything the server knows except the armed
// faults, which are test configuration.
type stateDoc struct {
	Version int `json:"version"`
	// Holds are in insertion order, the order of the report.
	Holds   []holdState   `json:"holds"`
	Refunds []refundState `json:"refunds"`
	// Keys are the completed idempotency keys; claims of requests still
	// executing die with the process.
	Keys       []keyState  `json:"idempotency_keys"`
	Operations []Operation `json:"operations"`
	Drifts     []Drift     `json:"drifts"`
	// The money (money.go), absent from the files of builds before it and
	// of a fake that moved none: balance transactions in booking order,
	// payouts in the order they were made, the last day paid out, the
	// drifts of their listings.
	BalanceTransactions []BalanceTransaction `json:"balance_transactions,omitempty"`
	Payouts             []Payout             `json:"payouts,omitempty"`
	SettledThrough      time.Time            `json:"settled_through,omitzero"`
	MoneyDrifts         []MoneyDrift         `json:"money_drifts,omitempty"`
}

// holdState is a hold as stored.
type holdState struct {
	Ref           string `json:"ref"`
	PaymentMethod string `json:"payment_method"`
	// Card (brand, last4) and CardDecline: a hold charged to a card.
	Card          *cardJSON         `json:"card,omitempty"`
	CardDecline   string            `json:"card_decline,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Status        providers.Status  `json:"status"`
	AmountMinor   int64             `json:"amount_minor"`
	CapturedMinor int64             `json:"captured_minor"`
	RefundedMinor int64             `json:"refunded_minor"`
	Currency      string            `json:"currency"`
	DeclineCode   string            `json:"decline_code,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	CaptureBefore time.Time         `json:"capture_before,omitzero"`
	Touched       []time.Time       `json:"touched"`
	// ExpiryNotified: its hold.expired webhook was sent.
	ExpiryNotified bool `json:"expiry_notified,omitempty"`
	// 3-D Secure (threeds.go): the issuer's treatment, the cardholder's
	// return, and the challenge of a hold that had one.
	ThreeDS        threeDS `json:"three_d_secure,omitempty"`
	ReturnURL      string  `json:"return_url,omitempty"`
	RequestThreeDS bool    `json:"request_three_d_secure,omitempty"`
	ConfirmKey     string  `json:"confirm_key,omitempty"`
	ChallengeToken string  `json:"challenge_token,omitempty"`
	NextActionURL  string  `json:"next_action_url,omitempty"`
	AuthResult     string  `json:"auth_result,omitempty"`
	// Flexible holds (flex.go); absent from the files of builds before
	// them, which read as a hold that asked for none.
	FlexRule       flexRule `json:"flex_rule,omitempty"`
	Asked          flexAsk  `json:"asked,omitzero"`
	Granted        flexAsk  `json:"granted,omitzero"`
	MaxAmountMinor int64    `json:"max_amount_minor,omitempty"`
	OvercapturePct int      `json:"overcapture_percent,omitempty"`
	Parts          []Part   `json:"parts,omitempty"`
}

// refundState is a refund as stored.
type refundState struct {
	Ref         string    `json:"ref"`
	HoldRef     string    `json:"hold_ref"`
	AmountMinor int64     `json:"amount_minor"`
	CreatedAt   time.Time `json:"created_at"`
}

// keyState is a completed idempotency key as stored. Body is the stored
// answer verbatim, so a replay after a restart is byte for byte the first
// answer.
type keyState struct {
	Endpoint    string `json:"endpoint"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
	Status      int    `json:"status"`
	Body        string `json:"body"`
	// HoldRef is the hold the answer is of, which the key is compacted
	// with (compact.go); absent from the files of builds before
	// compaction, whose keys then stay as they are.
	HoldRef string `json:"hold_ref,omitempty"`
}

// persistLocked writes the whole state to Config.StateFile, when set.
// Called with s.mu held, so the file is always one consistent snapshot. A
// failure is logged: the request has executed and the state in memory
// stays authoritative; the next change writes the whole state again.
func (s *Server) persistLocked() {
	if s.cfg.StateFile == "" {
		return
	}
	if err := s.saveLocked(); err != nil {
		s.log.Error("fake provider: persisting state failed", "file", s.cfg.StateFile, "error", err)
	}
}

// saveLocked writes the state atomically: a temporary file in the same
// folder, fsync, rename over the state file, fsync of the folder. Called
// with s.mu held.
func (s *Server) saveLocked() error {
	path := s.cfg.StateFile
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := json.NewEncoder(bw).Encode(s.snapshotLocked()); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	done = true
	// Make the rename itself durable. Best effort: not every system can
	// sync a folder.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// snapshotLocked is the state as stored. Called with s.mu held.
func (s *Server) snapshotLocked() *stateDoc {
	doc := &stateDoc{
		Version:    stateVersion,
		Holds:      make([]holdState, 0, len(s.order)),
		Refunds:    []refundState{},
		Keys:       make([]keyState, 0, len(s.keys)),
		Operations: s.operationsLocked(""),
		Drifts:     s.drifts,
	}
	if doc.Drifts == nil {
		doc.Drifts = []Drift{}
	}
	s.snapshotMoneyLocked(doc)
	s.snapshotHoldsLocked(doc)
	owner := map[string]string{}
	for _, h := range s.holds {
		for _, scope := range h.keys {
			owner[scope] = h.ref
		}
	}
	for scope, e := range s.keys {
		if e.done {
			doc.Keys = append(doc.Keys, e.state(scope, owner[scope]))
		}
	}
	slices.SortFunc(doc.Keys, func(a, b keyState) int {
		if c := strings.Compare(a.Endpoint, b.Endpoint); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return doc
}

// snapshotHoldsLocked adds the holds, compacted ones too, in insertion
// order, their refunds in the order they were made, and the keys of the
// compacted ones, to doc. Called with s.mu held.
func (s *Server) snapshotHoldsLocked(doc *stateDoc) {
	add := func(h *hold) {
		doc.Holds = append(doc.Holds, h.state())
		for _, rf := range h.refunds {
			doc.Refunds = append(doc.Refunds, rf.state())
		}
	}
	for i := range s.order {
		if h := s.order[i].live; h != nil {
			add(h)
			continue
		}
		rec := s.coldRecordLocked(i)
		add(rec.hold())
		doc.Keys = append(doc.Keys, rec.Keys...)
	}
	slices.SortFunc(doc.Refunds, func(a, b refundState) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Ref, b.Ref)
	})
}

// state is h as stored; its refunds and keys are stored on their own.
func (h *hold) state() holdState {
	return holdState{
		Ref: h.ref, PaymentMethod: h.paymentMethod, Card: h.card, CardDecline: h.cardDecline,
		Description: h.description, Metadata: h.metadata,
		Status: h.status, AmountMinor: h.amount, CapturedMinor: h.captured, RefundedMinor: h.refunded,
		Currency: h.currency, DeclineCode: h.declineCode,
		CreatedAt: h.created, UpdatedAt: h.updated, CaptureBefore: h.captureBefore, Touched: h.touched,
		ExpiryNotified: h.expiryNotified,
		ThreeDS:        h.threeDS, ReturnURL: h.returnURL, RequestThreeDS: h.requestThreeDS, ConfirmKey: h.confirmKey,
		ChallengeToken: h.challengeToken, NextActionURL: h.nextActionURL, AuthResult: h.authResult,
		FlexRule: h.flexRule, Asked: h.asked, Granted: h.granted, MaxAmountMinor: h.maxAmount,
		OvercapturePct: h.overcapturePct, Parts: h.parts,
	}
}

// hold rebuilds the hold hs stores, without its refunds and keys.
func (hs *holdState) hold() *hold {
	meta := hs.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return &hold{
		ref: hs.Ref, paymentMethod: hs.PaymentMethod, card: hs.Card, cardDecline: hs.CardDecline,
		description: hs.Description, metadata: meta,
		status: hs.Status, amount: hs.AmountMinor, captured: hs.CapturedMinor, refunded: hs.RefundedMinor,
		currency: hs.Currency, declineCode: hs.DeclineCode,
		created: hs.CreatedAt, updated: hs.UpdatedAt, captureBefore: hs.CaptureBefore, touched: hs.Touched,
		expiryNotified: hs.ExpiryNotified,
		threeDS:        hs.ThreeDS, returnURL: hs.ReturnURL, requestThreeDS: hs.RequestThreeDS, confirmKey: hs.ConfirmKey,
		challengeToken: hs.ChallengeToken, nextActionURL: hs.NextActionURL, authResult: hs.AuthResult,
		flexRule: hs.FlexRule, asked: hs.Asked, granted: hs.Granted, maxAmount: hs.MaxAmountMinor,
		overcapturePct: hs.OvercapturePct, parts: hs.Parts,
	}
}

// state is rf as stored.
func (rf refund) state() refundState {
	return refundState{Ref: rf.ref, HoldRef: rf.holdRef, AmountMinor: rf.amount, CreatedAt: rf.created}
}

// refund rebuilds the refund rs stores.
func (rs refundState) refund() refund {
	return refund{ref: rs.Ref, holdRef: rs.HoldRef, amount: rs.AmountMinor, created: rs.CreatedAt}
}

// state is e, the completed key of scope whose answer is of hold
// holdRef ("" when of none), as stored.
func (e *keyEntry) state(scope, holdRef string) keyState {
	endpoint, key, _ := strings.Cut(scope, "\x00")
	return keyState{Endpoint: endpoint, Key: key, HoldRef: holdRef,
		Fingerprint: hex.EncodeToString(e.fingerprint[:]), Status: e.status, Body: string(e.body)}
}

// entry rebuilds and checks the key ks stores, and returns it with its
// scope.
func (ks keyState) entry() (string, *keyEntry, error) {
	if ks.Endpoint == "" || checkKey(ks.Key) != nil {
		return "", nil, fmt.Errorf("idempotency key %q of %q is invalid", ks.Key, ks.Endpoint)
	}
	e := &keyEntry{done: true, status: ks.Status, body: []byte(ks.Body)}
	fp, err := hex.DecodeString(ks.Fingerprint)
	if err != nil || len(fp) != len(e.fingerprint) {
		return "", nil, fmt.Errorf("idempotency key %q of %q has a bad fingerprint", ks.Key, ks.Endpoint)
	}
	copy(e.fingerprint[:], fp)
	if ks.Status < 200 || ks.Status > 599 || !json.Valid(e.body) {
		return "", nil, fmt.Errorf("idempotency key %q of %q has a bad stored answer", ks.Key, ks.Endpoint)
	}
	return ks.Endpoint + "\x00" + ks.Key, e, nil
}

// loadState fills the new, empty s from Config.StateFile. A missing file is
// an empty state, written at once so that an unwritable location fails
// here rather than on the first request. A file that cannot be read or
// does not hold a valid state is an error: the state is never silently
// reset.
func (s *Server) loadState() error {
	path := s.cfg.StateFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.saveLocked(); err != nil {
			return fmt.Errorf("fake: creating state file %s: %w", path, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("fake: reading state file %s: %w", path, err)
	}
	if err := s.restore(b); err != nil {
		return fmt.Errorf("fake: state file %s is not a valid fake provider state (fix or remove it): %w", path, err)
	}
	return nil
}

// restore decodes and checks a state file into the new, empty s.
func (s *Server) restore(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc stateDoc
	if err := dec.Decode(&doc); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the state")
	}
	if doc.Version != stateVersion {
		return fmt.Errorf("version %d, this build reads version %d", doc.Version, stateVersion)
	}
	for i, hs := range doc.Holds {
		h, err := s.restoreHold(i, hs)
		if err != nil {
			return err
		}
		s.holds[h.ref] = h
		s.order = append(s.order, holdSlot{live: h})
	}
	refunds := map[string]bool{}
	for _, rs := range doc.Refunds {
		h := s.holds[rs.HoldRef]
		switch {
		case rs.Ref == "" || refunds[rs.Ref]:
			return fmt.Errorf("refund %q has no ref or is there twice", rs.Ref)
		case h == nil:
			return fmt.Errorf("refund %s is of an unknown hold %q", rs.Ref, rs.HoldRef)
		}
		refunds[rs.Ref] = true
		h.refunds = append(h.refunds, rs.refund())
	}
	for _, ks := range doc.Keys {
		scope, e, err := ks.entry()
		if err != nil {
			return err
		}
		if s.keys[scope] != nil {
			return fmt.Errorf("idempotency key %q of %q is there twice", ks.Key, ks.Endpoint)
		}
		s.keys[scope] = e
		if h := s.holds[ks.HoldRef]; h != nil {
			h.keys = append(h.keys, scope)
		}
	}
	for i, op := range doc.Operations {
		if op.Seq != int64(i+1) {
			return fmt.Errorf("operation %d has seq %d", i+1, op.Seq)
		}
	}
	s.ops = doc.Operations
	for i, d := range doc.Drifts {
		if (d.Kind == DriftAdd) != (d.Row != nil) {
			return fmt.Errorf("drift %d: only an add drift has a row, and it must", i+1)
		}
		if (d.Kind == DriftPartAdd) != (d.NewPart != nil) {
			return fmt.Errorf("drift %d: only a part_add drift has a new_part, and it must", i+1)
		}
	}
	if len(doc.Drifts) > 0 {
		s.drifts = doc.Drifts
	}
	return s.restoreMoney(doc)
}

// restoreHold checks the i-th stored hold against those restored before
// it and rebuilds it.
func (s *Server) restoreHold(i int, hs holdState) (*hold, error) {
	switch {
	case hs.Ref == "":
		return nil, fmt.Errorf("hold %d has no ref", i+1)
	case s.holds[hs.Ref] != nil:
		return nil, fmt.Errorf("hold %s is there twice", hs.Ref)
	case hs.Status != providers.StatusRequiresConfirmation && !knownStatus(hs.Status):
		return nil, fmt.Errorf("hold %s has an unknown status %q", hs.Ref, hs.Status)
	case hs.Status == providers.StatusRequiresAction && (hs.ChallengeToken == "" || hs.NextActionURL == ""):
		return nil, fmt.Errorf("hold %s waits for authentication without a challenge", hs.Ref)
	case hs.FlexRule != flexGranted && hs.FlexRule != flexUnavailable && hs.FlexRule != flexIncrementDeclined:
		return nil, fmt.Errorf("hold %s has an unknown flex_rule %q", hs.Ref, hs.FlexRule)
	}
	for _, p := range hs.Parts {
		if !validPartKind(p.Kind) {
			return nil, fmt.Errorf("hold %s has a part of unknown kind %q", hs.Ref, p.Kind)
		}
	}
	return hs.hold(), nil
}

// snapshotMoneyLocked adds the money to doc. Called with s.mu held.
func (s *Server) snapshotMoneyLocked(doc *stateDoc) {
	for _, bt := range s.bts {
		doc.BalanceTransactions = append(doc.BalanceTransactions, bt.stored())
	}
	for _, p := range s.payouts {
		doc.Payouts = append(doc.Payouts, p.stored())
	}
	doc.SettledThrough, doc.MoneyDrifts = s.settledThrough, s.moneyDrifts
}

// restoreMoney checks and rebuilds the money of doc into s, its holds
// restored: every balance transaction has an id of its own and a known
// type, and names a payout the file has or none; an unpaid one is
// waiting to be paid out.
func (s *Server) restoreMoney(doc stateDoc) error {
	payouts := map[string]bool{}
	for _, p := range doc.Payouts {
		if p.ID == "" || payouts[p.ID] || !validCurrency(p.Currency) || p.AmountMinor <= 0 {
			return fmt.Errorf("payout %q has no id, is there twice, or has a bad currency or amount", p.ID)
		}
		payouts[p.ID] = true
		s.payouts = append(s.payouts, &payoutRec{id: p.ID, amount: p.AmountMinor, currency: p.Currency,
			reference: p.Reference, created: p.CreatedAt, arrival: p.ArrivalDate})
	}
	ids := map[string]bool{}
	for _, b := range doc.BalanceTransactions {
		switch {
		case b.ID == "" || ids[b.ID]:
			return fmt.Errorf("balance transaction %q has no id or is there twice", b.ID)
		case b.Type != providers.BalanceCharge && b.Type != providers.BalanceRefund &&
			b.Type != providers.BalanceDispute && b.Type != providers.BalancePayout:
			return fmt.Errorf("balance transaction %s has an unknown type %q", b.ID, b.Type)
		case b.PayoutID != "" && !payouts[b.PayoutID]:
			return fmt.Errorf("balance transaction %s names an unknown payout %q", b.ID, b.PayoutID)
		case b.FeeMinor < 0 || !validCurrency(b.Currency):
			return fmt.Errorf("balance transaction %s has a negative fee or a bad currency", b.ID)
		}
		ids[b.ID] = true
		bt := &balanceTxn{id: b.ID, typ: b.Type, source: b.Source, holdRef: b.HoldRef, paymentID: b.PaymentID,
			opKey: b.OperationKey, currency: b.Currency, gross: b.GrossMinor, fee: b.FeeMinor,
			payoutID: b.PayoutID, created: b.CreatedAt, availableOn: b.AvailableOn}
		s.bts = append(s.bts, bt)
		if bt.payoutID == "" {
			s.unpaid = append(s.unpaid, bt)
		}
	}
	s.settledThrough = doc.SettledThrough
	for i, d := range doc.MoneyDrifts {
		if (d.Kind == DriftPayoutItemAdd) != (d.Item != nil) {
			return fmt.Errorf("money drift %d: only a payout_item_add drift has an item, and it must", i+1)
		}
	}
	s.moneyDrifts = doc.MoneyDrifts
	return nil
}
