package fake

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/maphash"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Server is the fake provider's HTTP service. It keeps every object in
// memory (and in Config.StateFile, when set) and is safe for concurrent use. It implements http.Handler; serve
// it with Start, ListenAndServe or any http.Server.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// pages serves the 3-D Secure challenge pages, which need no bearer
	// token (challenge.go).
	pages *http.ServeMux
	// tokenHash is the SHA-256 of cfg.Token, which every request carries.
	tokenHash [sha256.Size]byte
	// cardKey keys the HMAC of card numbers in idempotency fingerprints.
	cardKey []byte
	done    chan struct{}
	once    sync.Once

	faults faultSet
	// hooks sends webhooks; nil when Config.WebhookURL is empty.
	hooks *webhookSender

	// compactMu makes one Compact run at a time; packer is its codec,
	// used without mu (compact.go).
	compactMu sync.Mutex
	packer    coldCodec

	// mu guards everything below.
	mu sync.Mutex
	// holds are the live holds; order every hold, live or packed, in
	// insertion order, for the report (compact.go).
	holds map[string]*hold
	order []holdSlot
	keys  map[string]*keyEntry // by scope(pattern, key)
	// The packed holds by reference and by their keys' scopes, and the
	// codec that reads them (compact.go).
	coldRefs, coldKeys coldIndex
	codec              coldCodec
	// ops is the operations log after the opsPacked packed in opChunks.
	ops       []Operation
	opChunks  [][]byte
	opsPacked int64
	drifts    []Drift
	// The money (money.go): every balance transaction in booking order,
	// those not yet paid out, the payouts made, the last day whose
	// payouts were made, and the drifts of their listings.
	bts            []*balanceTxn
	unpaid         []*balanceTxn
	payouts        []*payoutRec
	settledThrough time.Time
	moneyDrifts    []MoneyDrift
}

// NewServer returns a Server with cfg's zero fields defaulted, holding the
// state of cfg.StateFile when that is set. It panics if cfg is invalid (a
// negative duration) or its StateFile cannot be loaded; Start and
// ListenAndServe return that error instead.
func NewServer(cfg Config) *Server {
	s, err := newServer(cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// newServer is NewServer returning its error.
func newServer(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		mux:   http.NewServeMux(),
		pages: http.NewServeMux(),
		done:  make(chan struct{}),
		holds: make(map[string]*hold),
		keys:  make(map[string]*keyEntry),
	}
	seed := maphash.MakeSeed()
	s.coldRefs, s.coldKeys = newColdIndex(seed), newColdIndex(seed)
	s.tokenHash = sha256.Sum256([]byte(cfg.Token))
	s.cardKey = cardKey(cfg.Token)
	s.routes()
	if cfg.StateFile != "" {
		if err := s.loadState(); err != nil {
			return nil, err
		}
	}
	s.startWebhooks()
	go s.compactLoop()
	return s, nil
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/holds", s.handleCreate)
	s.mux.HandleFunc("POST /v1/holds/{ref}/confirm", s.handleConfirm)
	s.mux.HandleFunc("POST /v1/holds/{ref}/capture", s.handleCapture)
	s.mux.HandleFunc("POST /v1/holds/{ref}/cancel", s.handleCancel)
	s.mux.HandleFunc("POST /v1/holds/{ref}/extend", s.handleExtend)
	s.mux.HandleFunc("POST /v1/holds/{ref}/increment", s.handleIncrement)
	s.mux.HandleFunc("POST /v1/holds/{ref}/refunds", s.handleRefund)
	s.mux.HandleFunc("GET /v1/holds/{ref}", s.handleLookup)
	s.mux.HandleFunc("GET /v1/report", s.handleReport)
	s.mux.HandleFunc("GET /v1/balance_transactions", s.handleBalanceTransactions)
	s.mux.HandleFunc("GET /v1/payouts", s.handlePayouts)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	s.mux.HandleFunc("GET /_admin/operations", s.handleOperations)
	s.mux.HandleFunc("GET /_admin/faults", s.handleListFaults)
	s.mux.HandleFunc("POST /_admin/faults", s.handleInjectFault)
	s.mux.HandleFunc("DELETE /_admin/faults", s.handleClearFaults)
	s.mux.HandleFunc("POST /_admin/report/drift", s.handleDrift)
	s.mux.HandleFunc("DELETE /_admin/report/drift", s.handleClearDrift)
	s.mux.HandleFunc("POST /_admin/money/drift", s.handleMoneyDrift)
	s.mux.HandleFunc("DELETE /_admin/money/drift", s.handleClearMoneyDrift)
	s.mux.HandleFunc("POST /_admin/holds", s.handleSeed)
	s.mux.HandleFunc("GET /_admin/webhooks", s.handleWebhookDeliveries)
	s.mux.HandleFunc("GET /_admin/webhooks/faults", s.handleListWebhookFaults)
	s.mux.HandleFunc("POST /_admin/webhooks/faults", s.handleInjectWebhookFault)
	s.mux.HandleFunc("DELETE /_admin/webhooks/faults", s.handleClearWebhookFaults)
	s.mux.HandleFunc("POST /_admin/disputes", s.handleDispute)
	s.mux.HandleFunc("POST /_admin/holds/{ref}/authenticate", s.handleAuthenticate)
	s.pages.HandleFunc("GET /3ds/{ref}", s.handleChallengePage)
	s.pages.HandleFunc("POST /3ds/{ref}", s.handleChallengeSubmit)
	s.pages.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeNoChallenge(w) })
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		e := invalid("", "unrecognized request URL (%s %s)", r.Method, r.URL.Path)
		e.status = http.StatusNotFound
		writeError(w, e)
	})
}

// challengePrefix starts the paths of the 3-D Secure challenge pages.
const challengePrefix = "/3ds/"

// ServeHTTP serves the fake provider's API to requests that carry its
// token; any other is a 401 and changes nothing. The challenge pages are
// the exception: a shopper's browser opens them, and the per-hold token
// in their URL is their key.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, challengePrefix) {
		s.pages.ServeHTTP(w, r)
		return
	}
	if !s.authorized(r) {
		unauthorized(w)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Token is the bearer token every request must carry: Config.Token, or
// the one generated when that was empty.
func (s *Server) Token() string { return s.cfg.Token }

// Close wakes every request held open by a latency or timeout_after_execute
// fault, so an http.Server can shut down promptly. The Server keeps
// answering other requests. Close is idempotent.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
}

// now is the injected clock in UTC, without a monotonic reading.
func (s *Server) now() time.Time { return s.cfg.Clock().UTC() }

// sleep waits d, or less when ctx is done (nil ctx: never) or the server is
// closed.
func (s *Server) sleep(ctx <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx:
	case <-s.done:
	}
}

// hang never answers: it holds the connection until the client gives up,
// TimeoutHang passes or the server closes, then aborts the connection so the
// client sees a transport error, never a response.
func (s *Server) hang(r *http.Request) {
	s.sleep(r.Context().Done(), s.cfg.TimeoutHang)
	panic(http.ErrAbortHandler)
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// decodeBody reads r's body (at most limit bytes) into v strictly: JSON
// only, no unknown fields, no trailing data. An empty body leaves v as is.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			e := invalid("", "request body larger than %d bytes", maxBodyBytes)
			e.status = http.StatusRequestEntityTooLarge
			return e
		}
		return invalid("", "reading request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		e := invalid("", "request body must be application/json")
		e.status = http.StatusUnsupportedMediaType
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("", "invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "invalid JSON body: data after the top-level value")
	}
	return nil
}

// marshal encodes v as one line of JSON.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every value marshalled here is a plain struct of our own.
		panic("fake: marshal: " + err.Error())
	}
	return append(b, '\n')
}

// writeJSON writes status and the JSON of v.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeRaw(w, status, marshal(v))
}

// writeRaw writes status and an already encoded JSON body.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError writes e as an error body.
func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, errorBody{Error: e.wireError})
}
