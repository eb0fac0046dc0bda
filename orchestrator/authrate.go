package orchestrator

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/internal/background"
)

// Routing by authorization rate (strategy auth_rate): the connectors of a
// rule are ordered by how often each gets payments authorized, measured
// from payorch's own attempts, so traffic goes where it is authorized and
// drifts away from a connector that degrades.
//
// What counts. An attempt is evidence about its connector's authorization
// rate only when the issuer answered it through that connector:
// authorized is a success, declined (soft or hard: the issuer's answer)
// a failure. not_executed and unknown say nothing about the card or the
// issuer, only about the connector's health: they feed the error breaker
// (breaker.go), not the score. rejected (our request was invalid),
// requires_action (the shopper has not answered yet) and attempts still
// without an answer do not count either.
//
// The window. Each connector's score is its last AuthRateConfig.Window
// answers that started within MaxAge: a count, not a time span, so the
// score reacts within the same number of payments whatever the traffic,
// and MaxAge forgets what is too old to say anything. Where each
// candidate of a choice has MinAnswers answers in the payment's currency
// and card brand (or currency), the scores of that segment are used,
// else the connector's.
//
// Shared and cheap. Every instance reads the same aggregate
// (authRateSQL: at most Window rows per connector, by the index on
// (connector, started_at)) every Refresh into an immutable snapshot; a
// decision reads the snapshot and the database not at all.
//
// Learning at once. Between two refreshes an instance also counts the
// answers it records itself (learnAnswer): a decision's window is this
// instance's answers since the snapshot, the newest, then the snapshot's
// newest, Window in all (answerWindow). So a connector that starts
// declining loses its place after as many answers as its score needs to
// fall, not after that plus a Refresh worth of payments; the other
// instances learn of those answers at their next refresh, from the
// attempts table, as before. A refresh drops the local answers its query
// sees (refreshAuthRates).
//
// The choice (authRateOrder in authratedecide.go) is Thompson sampling:
// each candidate's rate is drawn from its Beta(1 + authorized, 1 +
// declined) posterior and the highest draw goes first. It needs no
// tuning, sends a connector a share of traffic that shrinks as the
// evidence against it grows, and keeps sending a little to a connector
// whose score is uncertain. On top of it, a configurable share of
// payments (ExplorationPercent) goes to a candidate picked uniformly, so
// a connector that recovers is noticed even once the evidence against it
// is strong. The draws are seeded by the payment id: the same payment on
// the same scores always gets the same order, so every decision can be
// replayed from what its attempt stored.
//
// Elimination, distinct from the error breaker: a connector whose rate
// is EliminationGapPercent points or more below the best candidate's
// (both with MinAnswers answers) is eliminated for that choice: it goes
// last in the route (kept for failover, which the learning never
// changes: it only orders the candidates) for EliminationCooldownSeconds.
// Then it is probed: authRateProbePercent of the choice's payments go to
// it first until it has MinAnswers new answers, judged alone: still far
// below the best, it is eliminated again; otherwise it is back, its
// answers from before the probe forgotten.

// AuthRateOptions tunes a rule's auth_rate strategy. Zero fields take the
// defaults.
type AuthRateOptions struct {
	// ExplorationPercent is the share of the rule's payments, 0 to 50,
	// sent first to a candidate picked uniformly at random whatever the
	// scores; nil means DefaultExplorationPercent.
	ExplorationPercent *int `json:"exploration_percent,omitempty"`
	// EliminationGapPercent, 1 to 100: a connector whose authorization
	// rate is this many percentage points below the best candidate's is
	// eliminated; 0 means DefaultEliminationGapPercent.
	EliminationGapPercent int `json:"elimination_gap_percent,omitempty"`
	// EliminationCooldownSeconds, 10 to 86400, is how long an eliminated
	// connector stays out before it is probed; 0 means
	// DefaultEliminationCooldown.
	EliminationCooldownSeconds int `json:"elimination_cooldown_seconds,omitempty"`
}

// Defaults of AuthRateOptions.
const (
	DefaultExplorationPercent    = 5
	DefaultEliminationGapPercent = 20
	DefaultEliminationCooldown   = 5 * time.Minute
	maxExplorationPercent        = 50
	minEliminationCooldown       = 10
	maxEliminationCooldown       = 86400
	// authRateProbePercent is the share of a choice's payments sent first
	// to a connector being probed after its elimination.
	authRateProbePercent = 10
)

// validate checks the options; at is their path.
func (o *AuthRateOptions) validate(at string) error {
	if o.ExplorationPercent != nil && (*o.ExplorationPercent < 0 || *o.ExplorationPercent > maxExplorationPercent) {
		return ParamError(at+".exploration_percent", "exploration_percent must be from 0 to %d", maxExplorationPercent)
	}
	if o.EliminationGapPercent < 0 || o.EliminationGapPercent > 100 {
		return ParamError(at+".elimination_gap_percent", "elimination_gap_percent must be from 1 to 100")
	}
	if c := o.EliminationCooldownSeconds; c != 0 && (c < minEliminationCooldown || c > maxEliminationCooldown) {
		return ParamError(at+".elimination_cooldown_seconds", "elimination_cooldown_seconds must be from %d to %d",
			minEliminationCooldown, maxEliminationCooldown)
	}
	return nil
}

// authRateParams are a choice's options with the defaults filled in.
type authRateParams struct {
	explorePerMille int
	gapBP           int
	cooldown        time.Duration
}

func (o *AuthRateOptions) params() authRateParams {
	p := authRateParams{explorePerMille: DefaultExplorationPercent * 10, gapBP: DefaultEliminationGapPercent * 100,
		cooldown: DefaultEliminationCooldown}
	if o == nil {
		return p
	}
	if o.ExplorationPercent != nil {
		p.explorePerMille = *o.ExplorationPercent * 10
	}
	if o.EliminationGapPercent > 0 {
		p.gapBP = o.EliminationGapPercent * 100
	}
	if o.EliminationCooldownSeconds > 0 {
		p.cooldown = time.Duration(o.EliminationCooldownSeconds) * time.Second
	}
	return p
}

// AuthRateConfig tunes how each instance measures the connectors'
// authorization rates. Zero fields take the defaults (DefaultAuthRate).
type AuthRateConfig struct {
	// Refresh is how often each instance reads the scores again: what
	// the other instances answered since. Its own answers count at once.
	Refresh time.Duration
	// Window is how many of a connector's latest answers make its score.
	Window int
	// MaxAge: answers to attempts older than this do not count.
	MaxAge time.Duration
	// MinAnswers is the evidence a segment's score, an elimination and a
	// probe's verdict need.
	MinAnswers int
}

// DefaultAuthRate is used for the fields Config.AuthRate leaves zero.
var DefaultAuthRate = AuthRateConfig{Refresh: 2 * time.Second, Window: 100, MaxAge: time.Hour, MinAnswers: 30}

func (c AuthRateConfig) withDefaults() AuthRateConfig {
	if c.Refresh <= 0 {
		c.Refresh = DefaultAuthRate.Refresh
	}
	if c.Window <= 0 {
		c.Window = DefaultAuthRate.Window
	}
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultAuthRate.MaxAge
	}
	if c.MinAnswers <= 0 {
		c.MinAnswers = DefaultAuthRate.MinAnswers
	}
	return c
}

// authRateIdle: an instance that made no auth_rate decision for this long
// stops reading the scores (until its next decision).
const authRateIdle = 10 * time.Minute

// authRates is an instance's scores and elimination states.
type authRates struct {
	cfg AuthRateConfig
	// snap is replaced whole, never changed: a decision reads it without
	// a lock.
	snap atomic.Pointer[authRateSnapshot]
	// lastUse is when a decision last read the snapshot (unix nanos).
	lastUse atomic.Int64

	// localMu orders the writers of snap (a refresh, a local answer) so
	// that none loses another's change; seq numbers the local answers.
	localMu sync.Mutex
	seq     uint64

	mu      sync.Mutex
	choices map[choiceKey]*choiceState
}

// maxAuthRateChoices bounds the choices whose elimination states an
// instance keeps; past it they are all forgotten (old routing versions).
const maxAuthRateChoices = 10_000

func newAuthRates(cfg AuthRateConfig) *authRates {
	return &authRates{cfg: cfg.withDefaults(), choices: map[choiceKey]*choiceState{}}
}

// authRateSnapshot is the scores as one refresh read them, and the
// answers this instance recorded since.
type authRateSnapshot struct {
	at         time.Time
	connectors map[string]*connectorAnswers
	// local are, by connector, the answers this instance recorded that
	// the refresh may not have seen, oldest first, at most Window each.
	// What a slice shows never changes once stored (answered appends past
	// its end).
	local map[string][]localAnswer
}

// localAnswer is an answer this instance recorded (learnAnswer).
type localAnswer struct {
	// started is when the attempt started (unix micros), as started_at.
	started    int64
	authorized bool
	segment    segmentKey
	// seq is its number in the order this instance recorded them.
	seq uint64
}

// connectorAnswers are one connector's answers in the window.
type connectorAnswers struct {
	// times are the answered attempts' starts (unix micros), newest
	// first; cumAuth[i] counts the authorized among the i newest.
	times   []int64
	cumAuth []int32
	// segments are its answers by currency (brand "") and by currency and
	// brand.
	segments map[segmentKey]*segmentAnswers
}

// segmentAnswers are a connector's answers in one segment: their indexes
// in its times, ascending, and cumAuth[i], the authorized among the
// first i of them. So the segment's share of the connector's m newest
// answers (a decision's window, answerWindow) is one binary search.
type segmentAnswers struct {
	pos     []int32
	cumAuth []int32
}

type segmentKey struct{ currency, brand string }

// answerCounts are the answers of a connector at some level.
type answerCounts struct{ authorized, answered int }

// all is every answer in the window.
func (a *connectorAnswers) all() answerCounts {
	if a == nil {
		return answerCounts{}
	}
	return a.newest(len(a.times))
}

// newest counts the m newest answers (m at most len(times)).
func (a *connectorAnswers) newest(m int) answerCounts {
	if a == nil {
		return answerCounts{}
	}
	return answerCounts{authorized: int(a.cumAuth[m]), answered: m}
}

// since counts, among the m newest answers, those to attempts started at
// or after at (unix micros).
func (a *connectorAnswers) since(at int64, m int) answerCounts {
	if a == nil {
		return answerCounts{}
	}
	n := sort.Search(m, func(i int) bool { return a.times[i] < at })
	return a.newest(n)
}

// segment counts, among the m newest answers, those in segment k.
func (a *connectorAnswers) segment(k segmentKey, m int) answerCounts {
	if a == nil || a.segments[k] == nil {
		return answerCounts{}
	}
	sa := a.segments[k]
	n := sort.Search(len(sa.pos), func(i int) bool { return int(sa.pos[i]) >= m })
	return answerCounts{authorized: int(sa.cumAuth[n]), answered: n}
}

// add appends an answer (auth 1: authorized) to the window, in segment
// seg and in its currency's.
func (a *connectorAnswers) add(started int64, auth int, seg segmentKey) {
	i := len(a.times)
	a.times = append(a.times, started)
	a.cumAuth = append(a.cumAuth, a.cumAuth[i]+int32(auth))
	a.addTo(segmentKey{seg.currency, ""}, i, auth)
	if seg.brand != "" {
		a.addTo(seg, i, auth)
	}
}

// addTo counts the answer at index i of times in segment k.
func (a *connectorAnswers) addTo(k segmentKey, i, auth int) {
	sa := a.segments[k]
	if sa == nil {
		sa = &segmentAnswers{cumAuth: []int32{0}}
		a.segments[k] = sa
	}
	sa.pos = append(sa.pos, int32(i))
	sa.cumAuth = append(sa.cumAuth, sa.cumAuth[len(sa.cumAuth)-1]+int32(auth))
}

// newConnectorAnswers is an empty window.
func newConnectorAnswers() *connectorAnswers {
	return &connectorAnswers{cumAuth: []int32{0}, segments: map[segmentKey]*segmentAnswers{}}
}

// authRateSQL reads, for each of @connectors, its latest @window answered
// attempts started since @since, with their payment's currency and card
// brand: the index on (connector, started_at), backwards, at most
// @window rows each.
const authRateSQL = `
	SELECT c.connector, a.started_at, a.outcome = 'authorized' AS authorized, p.currency,
		coalesce(p.card->>'brand', '') AS brand
	FROM unnest(@connectors::text[]) AS c (connector)
	CROSS JOIN LATERAL (
		SELECT tenant_id, payment_id, started_at, outcome FROM payment_attempts
		WHERE connector = c.connector AND started_at >= @since AND outcome IN ('authorized', 'declined')
		ORDER BY started_at DESC
		LIMIT @window
	) a
	JOIN payments p ON p.tenant_id = a.tenant_id AND p.id = a.payment_id
	ORDER BY c.connector, a.started_at DESC`

// answerRow is a row of authRateSQL.
type answerRow struct {
	Connector  string    `db:"connector"`
	StartedAt  time.Time `db:"started_at"`
	Authorized bool      `db:"authorized"`
	Currency   string    `db:"currency"`
	Brand      string    `db:"brand"`
}

// refreshAuthRates reads the scores (authRateSQL) into a new snapshot,
// and keeps of the local answers only those its query may have missed.
func (s *Service) refreshAuthRates(ctx context.Context) error {
	now := s.now()
	// Answers recorded up to mark were committed before the query starts,
	// so its snapshot has them. Those recorded while it runs may be in it
	// too and are kept all the same: counted twice until the next
	// refresh, at most what this instance answers in one query's time; a
	// tie the draws hardly notice, and never an answer lost.
	a := s.authRates
	a.localMu.Lock()
	mark := a.seq
	a.localMu.Unlock()
	rows, _ := s.pool.Query(ctx, authRateSQL, NamedArgs{"connectors": s.connectorNames(),
		"since": now.Add(-a.cfg.MaxAge), "window": a.cfg.Window})
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[answerRow])
	if err != nil {
		return internalf("read authorization rates: %w", err)
	}
	snap := &authRateSnapshot{at: now, connectors: map[string]*connectorAnswers{}}
	for _, r := range got {
		c := snap.connectors[r.Connector]
		if c == nil {
			c = newConnectorAnswers()
			snap.connectors[r.Connector] = c
		}
		auth := 0
		if r.Authorized {
			auth = 1
		}
		c.add(r.StartedAt.UnixMicro(), auth, segmentKey{r.Currency, r.Brand})
	}
	a.localMu.Lock()
	defer a.localMu.Unlock()
	if old := a.snap.Load(); old != nil {
		for name, l := range old.local {
			// Oldest first: the answers after mark are a suffix.
			n := len(l)
			for n > 0 && l[n-1].seq > mark {
				n--
			}
			if n < len(l) {
				if snap.local == nil {
					snap.local = map[string][]localAnswer{}
				}
				snap.local[name] = l[n:]
			}
		}
	}
	a.snap.Store(snap)
	return nil
}

// answered adds an answer this instance recorded to the local answers,
// while this instance routes by auth_rate (an idle one keeps none: its
// first decision after the idle time reads the attempts table again
// anyway, at the next refresh), unless its attempt started more than
// MaxAge ago (it would not count in a window read now).
func (a *authRates) answered(connector string, ans localAnswer, now time.Time) {
	last := a.lastUse.Load()
	if last == 0 || now.Sub(time.Unix(0, last)) > authRateIdle || ans.started < now.Add(-a.cfg.MaxAge).UnixMicro() {
		return
	}
	a.localMu.Lock()
	defer a.localMu.Unlock()
	a.seq++
	ans.seq = a.seq
	next := &authRateSnapshot{}
	if cur := a.snap.Load(); cur != nil {
		*next = *cur
	}
	// A new map, since decisions may be reading the old one. The slice
	// is appended to in place: every list stored so far for connector
	// ends where this one does or before (only this, under localMu,
	// appends, always to the latest), so the write is past what any
	// reader sees; when full, append copies the newest Window answers.
	local := make(map[string][]localAnswer, len(next.local)+1)
	maps.Copy(local, next.local)
	l := append(local[connector], ans)
	local[connector] = l[max(0, len(l)-a.cfg.Window):]
	next.local = local
	a.snap.Store(next)
}

// learnAnswer counts in this instance's scores at once (answered) the
// answer to p's current attempt that this instance just wrote to the
// attempt's row: outcome, as attemptOutcome names it; only authorized
// and declined count, as in authRateSQL. p is pending on that attempt,
// so its updated_at is when the attempt started: createPaymentSQL and
// failOverSQL write both from the same time, and nothing else changes a
// pending payment's updated_at. An answer settled by the end of a
// challenge (settleAction) is left to the refresh: it comes long after
// the attempt started, often to another instance.
func (s *Service) learnAnswer(p Payment, outcome string) {
	if outcome != "authorized" && outcome != "declined" {
		return
	}
	seg := segmentKey{currency: p.Currency}
	if p.Card != nil {
		seg.brand = p.Card.Brand
	}
	s.authRates.answered(p.Provider, localAnswer{started: p.UpdatedAt.UnixMicro(), authorized: outcome == "authorized",
		segment: seg}, s.now())
}

// AuthRatesJob reads the connectors' authorization rates every Refresh
// (AuthRateConfig) while this instance routes by them: after
// authRateIdle without an auth_rate decision, a run reads nothing.
func (s *Service) AuthRatesJob() *background.Worker {
	return background.NewWorker("auth-rates", s.authRates.cfg.Refresh, max(5*time.Second, s.authRates.cfg.Refresh), s.logger,
		func(ctx context.Context) error {
			last := s.authRates.lastUse.Load()
			if last == 0 || s.now().Sub(time.Unix(0, last)) > authRateIdle {
				return nil
			}
			return s.refreshAuthRates(ctx)
		})
}

// EliminationState is a connector's standing in an auth_rate choice.
type EliminationState string

// Elimination states.
const (
	// AuthRateActive: the connector competes on its score.
	AuthRateActive EliminationState = "active"
	// AuthRateEliminated: far below the best, it goes last until its
	// cooldown ends.
	AuthRateEliminated EliminationState = "eliminated"
	// AuthRateProbing: after its cooldown, it gets a probe share until
	// its new answers say whether it is back.
	AuthRateProbing EliminationState = "probing"
)

// choiceKey names an auth_rate choice: a rule of a routing version.
type choiceKey struct {
	tenantID int64
	version  int
	rule     string
}

// choiceState is the elimination state of a choice's connectors.
type choiceState struct {
	mu    sync.Mutex
	conns map[string]*elimination
}

// elimination is one connector's standing in a choice.
type elimination struct {
	state EliminationState
	// until ends an elimination's cooldown.
	until time.Time
	// since: answers to attempts started before it are forgotten (set when
	// a probe starts).
	since time.Time
}

// choice returns the state of choice k, made on first use.
func (a *authRates) choice(k choiceKey) *choiceState {
	a.mu.Lock()
	defer a.mu.Unlock()
	cs := a.choices[k]
	if cs == nil {
		if len(a.choices) >= maxAuthRateChoices {
			clear(a.choices)
		}
		cs = &choiceState{conns: map[string]*elimination{}}
		a.choices[k] = cs
	}
	return cs
}

// ConnectorScore is a connector's authorization rate in this instance's
// latest snapshot (AuthRateScores), and how each auth_rate choice that
// lists it stands with it.
type ConnectorScore struct {
	Connector  string `json:"connector"`
	Authorized int    `json:"authorized"`
	Answered   int    `json:"answered"`
	// RateBP is Authorized / Answered in basis points, nil without
	// answers.
	RateBP       *int                   `json:"rate_bp"`
	Eliminations []ConnectorElimination `json:"eliminations"`
}

// ConnectorElimination is a connector eliminated from, or probed by, an
// auth_rate choice: the rule (its name, "" for the default) of a tenant's
// routing version.
type ConnectorElimination struct {
	TenantID int64            `json:"tenant_id"`
	Version  int              `json:"version"`
	Rule     string           `json:"rule"`
	State    EliminationState `json:"state"`
	// Until is when an elimination's cooldown ends.
	Until *time.Time `json:"until,omitempty"`
}

// AuthRateScores returns every configured connector's score in this
// instance's latest snapshot and its eliminations, by name, and when the
// snapshot was read (zero: never). The scores are the attempts table's,
// the same on every instance: a decision adds this instance's answers
// since (answerWindow), which its stored scores show.
func (s *Service) AuthRateScores() ([]ConnectorScore, time.Time) {
	snap := s.authRates.snap.Load()
	var at time.Time
	out := make([]ConnectorScore, 0, len(s.providers))
	for _, name := range s.connectorNames() {
		sc := ConnectorScore{Connector: name, Eliminations: []ConnectorElimination{}}
		if snap != nil {
			at = snap.at
			c := snap.connectors[name].all()
			sc.Authorized, sc.Answered, sc.RateBP = c.authorized, c.answered, c.rateBP()
		}
		out = append(out, sc)
	}
	type keyed struct {
		k  choiceKey
		cs *choiceState
	}
	s.authRates.mu.Lock()
	choices := make([]keyed, 0, len(s.authRates.choices))
	for k, cs := range s.authRates.choices {
		choices = append(choices, keyed{k, cs})
	}
	s.authRates.mu.Unlock()
	slices.SortFunc(choices, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.k.tenantID, b.k.tenantID), cmp.Compare(a.k.version, b.k.version),
			cmp.Compare(a.k.rule, b.k.rule))
	})
	for _, c := range choices {
		c.cs.mu.Lock()
		for i := range out {
			if e := c.cs.conns[out[i].Connector]; e != nil && e.state != AuthRateActive {
				ce := ConnectorElimination{TenantID: c.k.tenantID, Version: c.k.version, Rule: c.k.rule, State: e.state}
				if e.state == AuthRateEliminated {
					u := e.until
					ce.Until = &u
				}
				out[i].Eliminations = append(out[i].Eliminations, ce)
			}
		}
		c.cs.mu.Unlock()
	}
	return out, at
}

// rateBP is the counts' rate in basis points, nil without answers.
func (c answerCounts) rateBP() *int {
	if c.answered == 0 {
		return nil
	}
	bp := (c.authorized*10000 + c.answered/2) / c.answered
	return &bp
}
