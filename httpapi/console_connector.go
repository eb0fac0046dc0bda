package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// connectorViewers are the roles that see the Connectors page.
var connectorViewers = []orchestrator.Role{orchestrator.RoleAdmin, orchestrator.RoleSupport}

// The Connectors page shows the last connectorHours clock hours, the
// current one last (so between 23 and 24 hours of attempts).
const connectorHours = 24

// connectorsPage is the data of the Connectors page.
type connectorsPage struct {
	Since, Until time.Time
	Connectors   []connectorView
}

// connectorView is one connector on the Connectors page: its health in
// this instance, its attempts over the window, charts and hourly rows.
type connectorView struct {
	orchestrator.ConnectorHealth
	Total                 orchestrator.AttemptStats
	Rate, Errors, Latency svgChart
	Hours                 []connectorHour
	// Score is its auth_rate score and eliminations in this instance;
	// Learning charts what auth_rate decisions saw of it, hour by hour.
	Score    orchestrator.ConnectorScore
	Learning svgChart
}

// connectorHour is one hour's row of a connector's table.
type connectorHour struct {
	Label string
	orchestrator.AttemptStats
}

// consoleConnectors: GET /console/connectors lists every configured
// connector with its breaker's state in this instance and, for the last
// 24 hours, its authorization rate, error share and p50/p95 latency as
// charts and tables. Admins and support only.
func (s *Server) consoleConnectors(c echo.Context) error {
	now := s.now().UTC()
	since := now.Truncate(time.Hour).Add(-(connectorHours - 1) * time.Hour)
	stats, err := s.svc.ConnectorStats(c.Request().Context(), since, time.Hour)
	if err != nil {
		return s.consoleError(c, err)
	}
	history, err := s.svc.AuthRateHistory(c.Request().Context(), since, time.Hour)
	if err != nil {
		return s.consoleError(c, err)
	}
	byName := make(map[string]orchestrator.ConnectorStats, len(stats))
	for _, st := range stats {
		byName[st.Connector] = st
	}
	scores, _ := s.svc.AuthRateScores()
	scoreOf := make(map[string]orchestrator.ConnectorScore, len(scores))
	for _, sc := range scores {
		scoreOf[sc.Connector] = sc
	}
	page := connectorsPage{Since: since, Until: now}
	for i, h := range s.svc.ConnectorHealth() {
		v := newConnectorView(i, h, byName[h.Name])
		v.Score, v.Learning = scoreOf[h.Name], learningChart("c"+strconv.Itoa(i), h.Name, history[h.Name])
		page.Connectors = append(page.Connectors, v)
	}
	return s.render(c, http.StatusOK, "connectors", "Connectors", page)
}

// newConnectorView builds connector h's view from its statistics; i makes
// its charts' ids unique on the page.
func newConnectorView(i int, h orchestrator.ConnectorHealth, st orchestrator.ConnectorStats) connectorView {
	v := connectorView{ConnectorHealth: h, Total: st.Total}
	n := len(st.Buckets)
	xLabels := make([]string, n)
	rate, share, p50, p95 := make([]*float64, n), make([]*float64, n), make([]*float64, n), make([]*float64, n)
	rateT, shareT, p50T, p95T := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	maxShare, maxMS := 0.0, 0.0
	for j, b := range st.Buckets {
		start := b.Start.UTC()
		label := start.Format("15:04") + "–" + b.End.UTC().Format("15:04") + " UTC"
		v.Hours = append(v.Hours, connectorHour{Label: label, AttemptStats: b})
		if start.Hour()%6 == 0 {
			xLabels[j] = start.Format("15:04")
		}
		rate[j], share[j], p50[j], p95[j] = b.AuthorizationRate, b.ErrorShare, b.P50MS, b.P95MS
		rateT[j] = fmt.Sprintf("%s: %s authorized (%d of %d answered)", label, formatShareP(b.AuthorizationRate),
			b.Authorized, b.Authorized+b.Declined)
		shareT[j] = fmt.Sprintf("%s: %s errors (%d of %d attempts)", label, formatShareP(b.ErrorShare), b.Errors, b.Attempts)
		p50T[j] = label + ": p50 " + formatMSP(b.P50MS)
		p95T[j] = label + ": p95 " + formatMSP(b.P95MS)
		if b.ErrorShare != nil {
			maxShare = max(maxShare, *b.ErrorShare)
		}
		if b.P95MS != nil {
			maxMS = max(maxMS, *b.P95MS)
		}
	}
	id := "c" + strconv.Itoa(i)
	window := "over the last 24 hours, hour by hour (UTC)"
	v.Rate = lineChart(id+"-rate", h.Name+": authorization rate "+window,
		"Authorized attempts as a share of those authorized or declined, from 0 to 100 %. Hours without such answers have no point.",
		1, formatShare, xLabels, chartSeries{Name: "authorization rate", Class: "s-rate", Values: rate, Titles: rateT})
	shareMax := 1.0
	if maxShare > 0 {
		shareMax = min(1, niceCeil(maxShare))
	}
	v.Errors = lineChart(id+"-errors", h.Name+": error share "+window,
		"Attempts that did not execute or whose outcome is unknown, as a share of all attempts, from 0 to "+
			formatShare(shareMax)+". Hours without attempts have no point.",
		shareMax, formatShare, xLabels, chartSeries{Name: "error share", Class: "s-errors", Values: share, Titles: shareT})
	msMax := niceCeil(maxMS)
	v.Latency = lineChart(id+"-latency", h.Name+": p50 and p95 latency "+window,
		"Median and 95th percentile latency of the attempts' last provider call, from 0 to "+formatMS(msMax)+
			". Hours without calls have no point.",
		msMax, formatMS, xLabels,
		chartSeries{Name: "p50", Class: "s-p50", Values: p50, Titles: p50T},
		chartSeries{Name: "p95", Class: "s-p95", Values: p95, Titles: p95T})
	return v
}

// learningChart charts, hour by hour, the mean score auth_rate decisions
// saw for connector name and the share of them that put it first.
func learningChart(id, name string, pts []orchestrator.AuthRatePoint) svgChart {
	n := len(pts)
	xLabels := make([]string, n)
	score, share := make([]*float64, n), make([]*float64, n)
	scoreT, shareT := make([]string, n), make([]string, n)
	for j, p := range pts {
		start := p.Start.UTC()
		label := start.Format("15:04") + "–" + p.End.UTC().Format("15:04") + " UTC"
		if start.Hour()%6 == 0 {
			xLabels[j] = start.Format("15:04")
		}
		if p.ScoreBP != nil {
			v := *p.ScoreBP / 10000
			score[j] = &v
		}
		if p.Decisions > 0 {
			v := float64(p.Chosen) / float64(p.Decisions)
			share[j] = &v
		}
		scoreT[j] = fmt.Sprintf("%s: mean score %s over %d decisions", label, formatShareP(score[j]), p.Decisions)
		shareT[j] = fmt.Sprintf("%s: first in %s (%d of %d decisions)", label, formatShareP(share[j]), p.Chosen, p.Decisions)
	}
	return lineChart(id+"-learning", name+": auth_rate score and share of traffic over the last 24 hours, hour by hour (UTC)",
		"Among payments routed by auth_rate with this connector a candidate: the mean authorization rate their "+
			"decisions saw for it, and the share sent to it first, from 0 to 100 %. Hours without such payments have no point.",
		1, formatShare, xLabels,
		chartSeries{Name: "score", Class: "s-rate", Values: score, Titles: scoreT},
		chartSeries{Name: "share of traffic", Class: "s-p50", Values: share, Titles: shareT})
}
