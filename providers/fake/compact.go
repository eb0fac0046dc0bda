package fake

import (
	"maps"
	"slices"
	"time"

	"github.com/payorch/payorch/providers"
)

// Compaction keeps a long-running fake's memory small without changing
// what it answers. A hold left unchanged for Config.HoldRetention (or
// beyond Config.MaxLiveHolds) is packed, with its refunds and the stored
// answers of its idempotency keys, into one compressed record: the
// state file's own encoding of them (holdState, refundState, keyState),
// so the record rebuilds the very hold, and every answer is computed by
// the same code from the same fields. Reads (a lookup, a replay, the
// report) decode the record and leave it packed; a write (capture,
// refund, dispute, a challenge's completion, ...) unpacks it first and
// the hold lives again until it is compacted anew. Only two small indexes
// by hash (a reference, a key's scope) stay per packed hold. The
// operations log is packed likewise, by chunks of opsChunk. The
// balance transactions and payouts are kept as they are (money.go).

// compactBatch is how many holds compaction takes, then installs, per
// hold of the state lock: a few microseconds each.
const compactBatch = 256

// opsChunk is how many operations are packed together.
const opsChunk = 1024

// holdSlot is one hold in insertion order (the report's): live, or
// packed in cold.
type holdSlot struct {
	live *hold
	cold coldHold
}

// coldHold is a packed hold: its record, compressed (coldCodec.pack), and
// the Unix seconds of the first and last instants the report could count
// as its changes, so that a report skips it without decoding when its
// window misses them.
type coldHold struct {
	first, last int64
	blob        []byte
}

// mayChangeWithin reports whether the hold could have changed in
// [from, to): false means it surely did not.
func (c *coldHold) mayChangeWithin(from, to time.Time) bool {
	return c.last >= from.Unix() && c.first <= to.Unix()
}

// coldRecord is what a packed hold holds: the hold, then the rest.
type coldRecord struct {
	Hold holdState
	coldRest
}

// coldRest is the second part of a packed hold.
type coldRest struct {
	Refunds []refundState `json:"refunds,omitempty"`
	// Keys are the completed idempotency keys whose answers are of the
	// hold, each with its answer verbatim.
	Keys []keyState `json:"keys,omitempty"`
}

// hold rebuilds the hold rec packs, with its refunds but without its
// keys.
func (rec *coldRecord) hold() *hold {
	h := rec.Hold.hold()
	for _, rs := range rec.Refunds {
		h.refunds = append(h.refunds, rs.refund())
	}
	return h
}

// span is the Unix seconds of the first and last instants h.changedWithin
// could count: its changes, and the lapse of an authorized hold.
func (h *hold) span() (first, last int64) {
	lo, hi := h.created, h.updated
	for _, t := range h.touched {
		lo, hi = minTime(lo, t), maxTime(hi, t)
	}
	if h.status == providers.StatusAuthorized {
		hi = maxTime(hi, h.captureBefore)
	}
	return lo.Unix(), hi.Unix()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lastChange is when h last changed, or will lapse if that is later.
func (h *hold) lastChange() time.Time {
	if h.status == providers.StatusAuthorized {
		return maxTime(h.updated, h.captureBefore)
	}
	return h.updated
}

// coldRecordLocked decodes the record of packed slot i. Called with s.mu
// held.
func (s *Server) coldRecordLocked(i int) *coldRecord {
	rec := &coldRecord{}
	s.codec.unpack(s.order[i].cold.blob, &rec.Hold, &rec.coldRest)
	return rec
}

// coldHoldStateLocked decodes the hold of packed slot i, without the
// rest. Called with s.mu held.
func (s *Server) coldHoldStateLocked(i int) *holdState {
	hs := &holdState{}
	s.codec.unpack(s.order[i].cold.blob, hs, nil)
	return hs
}

// coldSlotLocked finds the slot of the packed hold ref, or -1. Called
// with s.mu held.
func (s *Server) coldSlotLocked(ref string) (int, *holdState) {
	slot, ok := s.coldRefs.get(ref)
	if !ok {
		return -1, nil
	}
	hs := s.coldHoldStateLocked(int(slot))
	if hs.Ref != ref {
		return -1, nil
	}
	return int(slot), hs
}

// holdLocked is hold ref, to change: a packed one is unpacked first. nil
// when there is none. Called with s.mu held.
func (s *Server) holdLocked(ref string) *hold {
	if h := s.holds[ref]; h != nil {
		return h
	}
	i, _ := s.coldSlotLocked(ref)
	if i < 0 {
		return nil
	}
	return s.thawLocked(i, s.coldRecordLocked(i))
}

// readHoldLocked is hold ref, to read: a packed one is decoded and stays
// packed, so a change to it is lost. nil when there is none. Called with
// s.mu held.
func (s *Server) readHoldLocked(ref string) *hold {
	if h := s.holds[ref]; h != nil {
		return h
	}
	if _, hs := s.coldSlotLocked(ref); hs != nil {
		return hs.hold()
	}
	return nil
}

// readSlotLocked is the hold of slot i, to read (readHoldLocked),
// without its refunds.
func (s *Server) readSlotLocked(i int) *hold {
	if h := s.order[i].live; h != nil {
		return h
	}
	return s.coldHoldStateLocked(i).hold()
}

// anyHoldPaidLocked reports whether a hold, live or packed, carries
// payment id pid. It reads every packed hold. Called with s.mu held.
func (s *Server) anyHoldPaidLocked(pid string) bool {
	for i := range s.order {
		if s.readSlotLocked(i).metadata[metaPaymentID] == pid {
			return true
		}
	}
	return false
}

// coldKeyLocked is the stored answer of a packed hold's key scope, nil
// when no packed hold has one. Called with s.mu held.
func (s *Server) coldKeyLocked(scope string) *keyEntry {
	slot, ok := s.coldKeys.get(scope)
	if !ok {
		return nil
	}
	for _, ks := range s.coldRecordLocked(int(slot)).Keys {
		if ks.Endpoint+"\x00"+ks.Key != scope {
			continue
		}
		_, e, err := ks.entry()
		if err != nil {
			panic("fake: compact: " + err.Error())
		}
		return e
	}
	return nil
}

// thawLocked unpacks slot i, whose record is rec: the hold and its keys
// live again. Called with s.mu held.
func (s *Server) thawLocked(i int, rec *coldRecord) *hold {
	h := rec.hold()
	for _, ks := range rec.Keys {
		scope, e, err := ks.entry()
		if err != nil {
			panic("fake: compact: " + err.Error())
		}
		s.keys[scope] = e
		s.coldKeys.del(scope, uint32(i))
		h.keys = append(h.keys, scope)
	}
	s.coldRefs.del(h.ref, uint32(i))
	s.holds[h.ref] = h
	s.order[i] = holdSlot{live: h}
	return h
}

// packRecordLocked is what packing h keeps of it. The record shares the
// hold's slices, which only ever grow (appends never rewrite what it
// reads), so it can be encoded after the lock is released. Called with
// s.mu held.
func (s *Server) packRecordLocked(h *hold) *coldRecord {
	rec := &coldRecord{Hold: h.state()}
	for _, rf := range h.refunds {
		rec.Refunds = append(rec.Refunds, rf.state())
	}
	for _, scope := range h.keys {
		if e := s.keys[scope]; e != nil && e.done {
			rec.Keys = append(rec.Keys, e.state(scope, h.ref))
		}
	}
	return rec
}

// installLocked replaces the live hold of slot i by its packed record,
// blob, and moves its keys to the index of the packed ones. Called with
// s.mu held.
func (s *Server) installLocked(i int, blob []byte) {
	h := s.order[i].live
	for _, scope := range h.keys {
		delete(s.keys, scope)
		s.coldKeys.put(scope, uint32(i))
	}
	first, last := h.span()
	s.order[i] = holdSlot{cold: coldHold{first: first, last: last, blob: blob}}
	delete(s.holds, h.ref)
	s.coldRefs.put(h.ref, uint32(i))
}

// compactable reports whether h may be packed: not while the hold.expired
// webhook of an authorized hold is still to be sent (the expiry watch
// reads live holds only). Called with s.mu held.
func (s *Server) compactable(h *hold) bool {
	return s.hooks == nil || h.status != providers.StatusAuthorized || h.expiryNotified
}

// version tells whether a hold changed: every change of its fields is
// touched (hold.touch), and the rest, the keys answered for it and its
// hold.expired announced, only grow.
type version struct {
	touched, keys int
	notified      bool
}

func (h *hold) version() version {
	return version{touched: len(h.touched), keys: len(h.keys), notified: h.expiryNotified}
}

// candidate is a live hold compaction may pack.
type candidate struct {
	slot    int
	h       *hold
	changed time.Time
	// Set when its record is taken.
	rec  *coldRecord
	seen version
	blob []byte
}

// candidatesLocked are the holds to pack at now, those changed longest
// ago first: every compactable one whose last change is
// Config.HoldRetention old, and more when the compactable ones left would
// be more than Config.MaxLiveHolds. Called with s.mu held.
func (s *Server) candidatesLocked(now time.Time) []candidate {
	var c []candidate
	for i := range s.order {
		if h := s.order[i].live; h != nil && s.compactable(h) {
			c = append(c, candidate{slot: i, h: h, changed: h.lastChange()})
		}
	}
	slices.SortStableFunc(c, func(a, b candidate) int { return a.changed.Compare(b.changed) })
	cutoff := now.Add(-s.cfg.HoldRetention)
	n := max(len(c)-s.cfg.MaxLiveHolds, 0)
	for n < len(c) && !c[n].changed.After(cutoff) {
		n++
	}
	return c[:n]
}

// Compact packs, now, the holds past Config.HoldRetention or beyond
// Config.MaxLiveHolds, and the operations log likewise, as the server
// does every Config.CompactEvery; it returns how many holds it packed.
// Nothing it does changes an answer. Records are taken and installed
// under the state lock, compactBatch at a time, and compressed without
// it, so requests hardly wait; a hold that changed in between is left
// for the next time.
func (s *Server) Compact() int {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	s.mu.Lock()
	cands := s.candidatesLocked(s.now())
	s.mu.Unlock()
	n := 0
	for batch := range slices.Chunk(cands, compactBatch) {
		s.mu.Lock()
		for i := range batch {
			if c := &batch[i]; s.order[c.slot].live == c.h && c.h.lastChange().Equal(c.changed) && s.compactable(c.h) {
				c.rec, c.seen = s.packRecordLocked(c.h), c.h.version()
			}
		}
		s.mu.Unlock()
		for i := range batch {
			if c := &batch[i]; c.rec != nil {
				c.blob = s.packer.pack(c.rec)
			}
		}
		s.mu.Lock()
		for _, c := range batch {
			if c.rec != nil && s.order[c.slot].live == c.h && c.h.version() == c.seen {
				s.installLocked(c.slot, c.blob)
				n++
			}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.packOpsLocked(s.now())
	if n >= len(s.holds) {
		// Maps never shrink: copied, they let the packed ones' room go.
		s.holds, s.keys = copyMap(s.holds), copyMap(s.keys)
	}
	s.mu.Unlock()
	return n
}

// copyMap is a copy of m sized for what it holds (maps.Clone keeps the
// room m grew to).
func copyMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	maps.Copy(out, m)
	return out
}

// compactLoop compacts every Config.CompactEvery until the server closes.
func (s *Server) compactLoop() {
	t := time.NewTicker(s.cfg.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			if n := s.Compact(); n > 0 {
				s.log.Debug("fake provider: holds compacted", "holds", n)
			}
		}
	}
}

// logOpLocked appends op to the operations log, numbered, and returns it.
// Called with s.mu held.
func (s *Server) logOpLocked(op Operation) Operation {
	op.Seq = s.opsPacked + int64(len(s.ops)) + 1
	s.ops = append(s.ops, op)
	return op
}

// packOpsLocked packs the oldest operations by chunks of opsChunk, while
// a whole chunk is Config.HoldRetention old or more than
// Config.MaxLiveHolds would stay. Called with s.mu and s.compactMu held.
func (s *Server) packOpsLocked(now time.Time) {
	cutoff := now.Add(-s.cfg.HoldRetention)
	for len(s.ops) >= opsChunk && (len(s.ops)-opsChunk >= s.cfg.MaxLiveHolds || !s.ops[opsChunk-1].At.After(cutoff)) {
		s.opChunks = append(s.opChunks, s.packer.encode(s.ops[:opsChunk]))
		// Moved down, not resliced, so the packed ones' strings go.
		n := copy(s.ops, s.ops[opsChunk:])
		clear(s.ops[n:])
		s.ops = s.ops[:n]
		s.opsPacked += opsChunk
	}
	if cap(s.ops) > 2*len(s.ops)+opsChunk {
		s.ops = slices.Clone(s.ops)
	}
}

// operationsLocked returns the executed operations in order, all of them
// when key is empty, else those carrying key. Packed ones are decoded:
// this reads the whole log. Called with s.mu held.
func (s *Server) operationsLocked(key string) []Operation {
	out := []Operation{}
	keep := func(ops []Operation) {
		for _, op := range ops {
			if key == "" || op.IdempotencyKey == key {
				out = append(out, op)
			}
		}
	}
	for _, blob := range s.opChunks {
		var ops []Operation
		s.codec.decode(blob, &ops)
		keep(ops)
	}
	keep(s.ops)
	return out
}
