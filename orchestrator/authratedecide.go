package orchestrator

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// RoutingDecision is why an attempt went to its connector, as its row
// keeps it (payment_attempts.routing) and GET /v1/payments/{id}/attempts
// shows it. Scores are integers (basis points, counts) so that what is
// stored is exact and a decision can be replayed from it.
type RoutingDecision struct {
	// Strategy is pinned (the request named its provider), priority,
	// volume_split or auth_rate for a first attempt, failover for a next
	// one.
	Strategy string `json:"strategy"`
	// Rule is the name of the rule that matched; absent for the default
	// (and when pinned).
	Rule string `json:"rule,omitempty"`
	// Version is the routing version that decided; absent when none did.
	Version int `json:"version,omitempty"`
	// Chosen is the connector the strategy put first.
	Chosen string `json:"chosen"`
	// Explored: auth_rate put Chosen first for exploration or a probe,
	// not for its score.
	Explored bool `json:"explored"`
	// Reason is, for auth_rate, what put Chosen first: score (the highest
	// draw), exploration, probe, or fallback (no candidate was active);
	// for failover, why the previous attempt moved on.
	Reason string `json:"reason,omitempty"`
	// Level is the scores' level for auth_rate: connector, currency or
	// currency_brand.
	Level string `json:"level,omitempty"`
	// Scores are auth_rate's candidates, in the order decided.
	Scores []CandidateScore `json:"scores,omitempty"`
	// BreakerSkipped are the connectors put before the attempt's that
	// were skipped because their health breaker was open.
	BreakerSkipped []string `json:"breaker_skipped,omitempty"`
	// From is, for failover, the previous attempt's connector.
	From string `json:"from,omitempty"`
}

// CandidateScore is one candidate of an auth_rate decision as it saw it.
type CandidateScore struct {
	Connector  string           `json:"connector"`
	State      EliminationState `json:"state"`
	Authorized int              `json:"authorized"`
	Answered   int              `json:"answered"`
	// RateBP is Authorized / Answered in basis points, nil without
	// answers.
	RateBP *int `json:"rate_bp"`
	// DrawBP is the Thompson draw from the candidate's posterior, in basis
	// points, for an active candidate.
	DrawBP *int `json:"draw_bp,omitempty"`
}

// Score levels of an auth_rate decision.
const (
	levelConnector     = "connector"
	levelCurrency      = "currency"
	levelCurrencyBrand = "currency_brand"
)

// answerWindow is a connector's window as a decision sees it: this
// instance's answers since the snapshot (local, counted as the newest
// whatever their start), then the snapshot's m newest (snap), Window in
// all. Counting it is a pass over local (at most Window answers, usually
// a Refresh's worth) and binary searches in snap.
type answerWindow struct {
	snap  *connectorAnswers
	local []localAnswer
	m     int
}

// window is connector name's window of at most size answers in s (nil:
// none read yet).
func (s *authRateSnapshot) window(name string, size int) answerWindow {
	if s == nil {
		return answerWindow{}
	}
	w := answerWindow{snap: s.connectors[name], local: s.local[name]}
	if w.snap != nil {
		w.m = max(0, min(len(w.snap.times), size-len(w.local)))
	}
	return w
}

// all counts every answer in the window.
func (w answerWindow) all() answerCounts {
	c := w.snap.newest(w.m)
	for i := range w.local {
		c.count(w.local[i].authorized)
	}
	return c
}

// since counts the answers to attempts started at or after t.
func (w answerWindow) since(t time.Time) answerCounts {
	at := t.UnixMicro()
	c := w.snap.since(at, w.m)
	for i := range w.local {
		if w.local[i].started >= at {
			c.count(w.local[i].authorized)
		}
	}
	return c
}

// segment counts the answers in segment k (brand "": every brand of the
// currency).
func (w answerWindow) segment(k segmentKey) answerCounts {
	c := w.snap.segment(k, w.m)
	for i := range w.local {
		if s := w.local[i].segment; s.currency == k.currency && (k.brand == "" || s.brand == k.brand) {
			c.count(w.local[i].authorized)
		}
	}
	return c
}

// count adds an answer.
func (c *answerCounts) count(authorized bool) {
	c.answered++
	if authorized {
		c.authorized++
	}
}

// candidate is a connector being ordered by authRateOrder.
type candidate struct {
	name    string
	answers answerWindow
	state   EliminationState
	// forgetting: answers before the connector's probe do not count.
	forgetting bool
	counts     answerCounts
	// segment is its counts at the level being tried (level).
	segment answerCounts
	draw    float64
}

// order decides an auth_rate choice: candidates are the choice's
// connectors that can take the payment in, in listed order; it returns
// them in the order to try and the decision's explanation. See the top of
// authrate.go; no database, one lock on the choice's state.
func (a *authRates) order(key choiceKey, p authRateParams, candidates []string, in *RouteInput, now time.Time) ([]string, *RoutingDecision) {
	a.lastUse.Store(now.UnixNano())
	snap := a.snap.Load()
	cs := make([]candidate, len(candidates))
	for i, name := range candidates {
		cs[i].name, cs[i].answers = name, snap.window(name, a.cfg.Window)
	}
	a.judge(key, p, cs, now)
	d := &RoutingDecision{Strategy: StrategyAuthRate, Rule: key.rule, Version: key.version,
		Level: a.level(cs, in)}
	// Seeded by the payment: the same payment on the same scores gets the
	// same draws (a retried request, a replayed decision).
	h := splitHash(in.PaymentID)
	rng := rand.New(rand.NewPCG(h, h^0x9e3779b97f4a7c15))
	probeRoll, exploreRoll := rng.IntN(1000), rng.IntN(1000)
	var active, probing []int
	for i := range cs {
		switch cs[i].state {
		case AuthRateActive:
			active = append(active, i)
			c := cs[i].counts
			cs[i].draw = betaDraw(rng, float64(1+c.authorized), float64(1+c.answered-c.authorized))
		case AuthRateProbing:
			probing = append(probing, i)
		}
	}
	// Highest draw first; ties (none in practice) in listed order.
	slices.SortStableFunc(active, func(x, y int) int { return cmp.Compare(cs[y].draw, cs[x].draw) })
	first := -1
	switch {
	case len(probing) > 0 && probeRoll < authRateProbePercent*10:
		first, d.Reason, d.Explored = probing[rng.IntN(len(probing))], "probe", true
	case len(active) > 1 && exploreRoll < p.explorePerMille:
		first, d.Reason, d.Explored = active[rng.IntN(len(active))], "exploration", true
	case len(active) > 0:
		first, d.Reason = active[0], "score"
	default:
		d.Reason = "fallback"
	}
	idx := make([]int, 0, len(cs))
	if first >= 0 {
		idx = append(idx, first)
	}
	for _, group := range [][]int{active, probing} {
		for _, i := range group {
			if i != first {
				idx = append(idx, i)
			}
		}
	}
	for i := range cs {
		if cs[i].state == AuthRateEliminated {
			idx = append(idx, i)
		}
	}
	route := make([]string, 0, len(cs))
	d.Scores = make([]CandidateScore, 0, len(cs))
	for _, i := range idx {
		c := &cs[i]
		route = append(route, c.name)
		sc := CandidateScore{Connector: c.name, State: c.state, Authorized: c.counts.authorized,
			Answered: c.counts.answered, RateBP: c.counts.rateBP()}
		if c.state == AuthRateActive {
			bp := int(math.Round(c.draw * 10000))
			sc.DrawBP = &bp
		}
		d.Scores = append(d.Scores, sc)
	}
	d.Chosen = route[0]
	return route, d
}

// judge moves the candidates' elimination states in the choice key on
// from their connector-level counts (this instance's answers since the
// snapshot included: a probe's answers count at once), and sets each
// candidate's state and counts.
func (a *authRates) judge(key choiceKey, p authRateParams, cs []candidate, now time.Time) {
	st := a.choice(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	best := -1
	for i := range cs {
		c := &cs[i]
		e := st.conns[c.name]
		if e == nil {
			e = &elimination{state: AuthRateActive}
			st.conns[c.name] = e
		}
		if e.state == AuthRateEliminated && !now.Before(e.until) {
			e.state, e.since = AuthRateProbing, e.until
		}
		c.counts = c.answers.all()
		if !e.since.IsZero() {
			since := c.answers.since(e.since)
			if e.state == AuthRateActive && since == c.counts {
				e.since = time.Time{} // nothing before the probe is left to forget
			}
			c.counts, c.forgetting = since, !e.since.IsZero()
		}
		if e.state == AuthRateActive && c.counts.answered >= a.cfg.MinAnswers {
			best = max(best, *c.counts.rateBP())
		}
	}
	for i := range cs {
		c := &cs[i]
		e := st.conns[c.name]
		if e.state != AuthRateEliminated && c.counts.answered >= a.cfg.MinAnswers {
			far := best >= 0 && best-*c.counts.rateBP() >= p.gapBP
			switch {
			case far:
				e.state, e.until, e.since = AuthRateEliminated, now.Add(p.cooldown), time.Time{}
			case e.state == AuthRateProbing:
				e.state = AuthRateActive // back, its answers before the probe forgotten
			}
		}
		c.state = e.state
	}
}

// level picks the level of the scores the active candidates are compared
// at, and sets their counts to it: the payment's currency and card brand
// where every active candidate has MinAnswers answers there, else its
// currency likewise, else the connector's whole window.
func (a *authRates) level(cs []candidate, in *RouteInput) string {
	keys := []struct {
		level string
		k     segmentKey
	}{{levelCurrencyBrand, segmentKey{in.Currency, in.CardBrand}}, {levelCurrency, segmentKey{in.Currency, ""}}}
	for _, l := range keys {
		if l.level == levelCurrencyBrand && in.CardBrand == "" {
			continue
		}
		enough, n := true, 0
		for i := range cs {
			if cs[i].state != AuthRateActive {
				continue
			}
			n++
			cs[i].segment = cs[i].answers.segment(l.k)
			if cs[i].forgetting || cs[i].segment.answered < a.cfg.MinAnswers {
				enough = false
				break
			}
		}
		if enough && n > 0 {
			for i := range cs {
				if cs[i].state == AuthRateActive {
					cs[i].counts = cs[i].segment
				}
			}
			return l.level
		}
	}
	return levelConnector
}

// betaDraw draws from Beta(alpha, beta), both at least 1, as X / (X + Y)
// of two Gamma draws.
func betaDraw(r *rand.Rand, alpha, beta float64) float64 {
	x := gammaDraw(r, alpha)
	return x / (x + gammaDraw(r, beta))
}

// gammaDraw draws from Gamma(k, 1), k at least 1: Marsaglia and Tsang's
// method ("A simple method for generating gamma variables", 2000).
func gammaDraw(r *rand.Rand, k float64) float64 {
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
