package fake

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/payorch/payorch/providers"
)

// How a packed hold is stored (compact.go): its record compressed
// (coldCodec), found through indexes by hash (coldIndex).

// coldIndex finds a packed hold's slot by a string (a reference, a key's
// scope) through a 64-bit hash of it, so it keeps no string per hold.
// The slot found must be checked against the record: a string never
// packed can share a hash with one that was. Two packed strings sharing
// a hash are told apart by exact, which keeps the later one in full.
type coldIndex struct {
	hash   func(string) uint64
	byHash map[uint64]uint32
	exact  map[string]uint32
}

func newColdIndex(seed maphash.Seed) coldIndex {
	return coldIndex{
		hash:   func(k string) uint64 { return maphash.String(seed, k) },
		byHash: map[uint64]uint32{},
		exact:  map[string]uint32{},
	}
}

func (x *coldIndex) put(k string, slot uint32) {
	h := x.hash(k)
	if _, taken := x.byHash[h]; taken {
		x.exact[k] = slot
		return
	}
	x.byHash[h] = slot
}

// get returns the slot k may be packed in.
func (x *coldIndex) get(k string) (uint32, bool) {
	if slot, ok := x.exact[k]; ok {
		return slot, true
	}
	slot, ok := x.byHash[x.hash(k)]
	return slot, ok
}

// del forgets k, packed in slot.
func (x *coldIndex) del(k string, slot uint32) {
	if s, ok := x.exact[k]; ok && s == slot {
		delete(x.exact, k)
		return
	}
	if h := x.hash(k); x.byHash[h] == slot {
		delete(x.byHash, h)
	}
}

// coldCodec compresses records with flate, primed with coldDict, which
// makes even one hold's record small. Used with the state lock held.
type coldCodec struct {
	w          *flate.Writer
	r          io.ReadCloser
	wbuf, rbuf bytes.Buffer
}

// pack is the blob of a coldHold of rec: the uvarint length of the
// hold's JSON, then the hold's and the rest's JSON compressed in one
// stream, so that the hold is read without inflating the rest, and the
// rest, which repeats the hold, compresses against it.
func (c *coldCodec) pack(rec *coldRecord) []byte {
	hold, rest := mustJSON(&rec.Hold), mustJSON(&rec.coldRest)
	c.wbuf.Reset()
	c.wbuf.Write(binary.AppendUvarint(nil, uint64(len(hold))))
	c.compress(hold, rest)
	return bytes.Clone(c.wbuf.Bytes())
}

// encode is the JSON of v, compressed.
func (c *coldCodec) encode(v any) []byte {
	c.wbuf.Reset()
	c.compress(mustJSON(v))
	return bytes.Clone(c.wbuf.Bytes())
}

// compress appends chunks, compressed in one stream, to c.wbuf.
func (c *coldCodec) compress(chunks ...[]byte) {
	var err error
	if c.w == nil {
		// BestSpeed: records this short come out hardly bigger than
		// with the best compression, in a third of the time.
		c.w, err = flate.NewWriterDict(&c.wbuf, flate.BestSpeed, coldDict())
	} else {
		c.w.Reset(&c.wbuf)
	}
	for _, b := range chunks {
		if err == nil {
			_, err = c.w.Write(b)
		}
	}
	if err == nil {
		err = c.w.Close()
	}
	if err != nil {
		panic("fake: compact: " + err.Error())
	}
}

// unpack decodes the hold of a coldHold's blob into hs and, when rest is
// not nil, the rest into rest.
func (c *coldCodec) unpack(blob []byte, hs *holdState, rest *coldRest) {
	n, w := binary.Uvarint(blob)
	c.inflate(blob[w:], int(n), rest != nil)
	b := c.rbuf.Bytes()
	mustUnJSON(b[:n], hs)
	if rest != nil {
		mustUnJSON(b[n:], rest)
	}
}

// decode fills v from a blob of encode.
func (c *coldCodec) decode(blob []byte, v any) {
	c.inflate(blob, 0, true)
	mustUnJSON(c.rbuf.Bytes(), v)
}

// inflate decompresses blob into c.rbuf: its first n bytes, or all of it.
// A blob is only ever one that pack or encode made: a failure is a bug.
func (c *coldCodec) inflate(blob []byte, n int, all bool) {
	br := bytes.NewReader(blob)
	if c.r == nil {
		c.r = flate.NewReaderDict(br, coldDict())
	} else if err := c.r.(flate.Resetter).Reset(br, coldDict()); err != nil {
		panic("fake: compact: " + err.Error())
	}
	c.rbuf.Reset()
	var err error
	if all {
		_, err = c.rbuf.ReadFrom(c.r)
	} else {
		_, err = io.CopyN(&c.rbuf, c.r, int64(n))
	}
	if err != nil {
		panic("fake: compact: " + err.Error())
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("fake: compact: " + err.Error())
	}
	return b
}

func mustUnJSON(b []byte, v any) {
	if err := json.Unmarshal(b, v); err != nil {
		panic("fake: compact: " + err.Error())
	}
}

// coldDict is the record of a typical hold, created, confirmed and
// captured, with the answers of its three keys: what a record repeats.
var coldDict = sync.OnceValue(func() []byte {
	t := time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC)
	h := &hold{ref: "fh_0123456789abcdef01234567", paymentMethod: defaultPaymentMethod,
		metadata: map[string]string{metaPaymentID: "0198c0de-0123-7abc-8def-0123456789ab", metaTenantID: "1"},
		status:   providers.StatusRequiresConfirmation, amount: 1000, currency: "EUR",
		created: t, updated: t, touched: []time.Time{t}}
	key := "po_" + strings.Repeat("0123456789abcdef", 4)
	fp := strings.Repeat("0f", 32)
	var rec coldRecord
	answer := func(endpoint string) {
		rec.Keys = append(rec.Keys, keyState{Endpoint: endpoint, Key: key, Fingerprint: fp, Status: 200,
			Body: string(marshal(h.view(t))), HoldRef: h.ref})
	}
	answer("POST /v1/holds")
	h.status, h.captureBefore = providers.StatusAuthorized, t.Add(DefaultHoldLifetime)
	h.touch(t)
	answer("POST /v1/holds/{ref}/confirm")
	h.status, h.captured = providers.StatusCaptured, h.amount
	h.parts = []Part{{Kind: providers.PartCapture, AmountMinor: h.amount, IdempotencyKey: key, CreatedAt: t}}
	h.touch(t)
	answer("POST /v1/holds/{ref}/capture")
	rec.Hold = h.state()
	rec.Refunds = []refundState{{Ref: "fr_0123456789abcdef01234567", HoldRef: h.ref, AmountMinor: 1, CreatedAt: t}}
	return append(mustJSON(rec.Hold), mustJSON(rec.coldRest)...)
})
