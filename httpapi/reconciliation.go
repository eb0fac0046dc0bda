package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

// Operations of the finance API, for the idempotency protocol.
const (
	opStartRun = "POST /v1/reconciliation/runs"
	opResolve  = "POST /v1/reconciliation/discrepancies/{id}/resolve"
)

type startRunRequest struct {
	Provider string `json:"provider"`
	Date     string `json:"date"`
}

type resolveRequest struct {
	Note string `json:"note"`
}

func runLocation(id int64) string { return "/v1/reconciliation/runs/" + strconv.FormatInt(id, 10) }

// startRun: POST /v1/reconciliation/runs (finance, admin). The run is
// recorded at once and executed in the background: 202 with the run and
// its Location, to poll until its status is succeeded or failed. The
// Reconciler queues it behind the runs already executing and bounds its
// work (reconcile.Config.RunTimeout).
func (s *Server) startRun(c echo.Context) error {
	var req startRunRequest
	key, fp, err := keyedRequest(c, opStartRun, nil, &req)
	if err != nil {
		return err
	}
	if req.Provider == "" {
		return orchestrator.ParamError("provider", "provider is required")
	}
	date, err := reconcile.ParseDate(req.Date)
	if err != nil {
		return err
	}
	if err := s.rec.CheckRun(req.Provider, date); err != nil { // before the key is claimed
		return err
	}
	p := principal(c)
	return s.idempotent(c, opStartRun, key, fp, func(ctx context.Context, _ *orchestrator.Claim) (result, error) {
		run, err := s.rec.Begin(ctx, req.Provider, date, reconcile.TriggerAPI, p.KeyID)
		if err != nil {
			return result{}, err
		}
		s.background(func(ctx context.Context) {
			_, _ = s.rec.Execute(ctx, run) // the outcome is recorded on the run
		})
		stored, err := orchestrator.JSONAnswer(http.StatusAccepted, run, runLocation(run.ID))
		if err != nil {
			return result{}, err
		}
		return finalResult(stored, ""), nil
	})
}

// listRuns: GET /v1/reconciliation/runs.
func (s *Server) listRuns(c echo.Context) error {
	q := c.QueryParams()
	f := reconcile.RunFilter{Provider: q.Get("provider")}
	if v := q.Get("date"); v != "" {
		if _, err := reconcile.ParseDate(v); err != nil {
			return err
		}
		f.Date = v
	}
	var err error
	if f.Limit, f.StartingAfter, err = pageParams(q, 100); err != nil {
		return err
	}
	runs, more, err := s.rec.ListRuns(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(runs, more))
}

// getRun: GET /v1/reconciliation/runs/{id}.
func (s *Server) getRun(c echo.Context) error {
	id, err := idParam(c, "reconciliation run")
	if err != nil {
		return err
	}
	run, err := s.rec.GetRun(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, run)
}

// listDiscrepancies: GET /v1/reconciliation/runs/{id}/discrepancies, as
// JSON pages or, with Accept: text/csv, the whole selection streamed.
func (s *Server) listDiscrepancies(c echo.Context) error {
	id, err := idParam(c, "reconciliation run")
	if err != nil {
		return err
	}
	q := c.QueryParams()
	f := reconcile.DiscrepancyFilter{RunID: id, Category: q.Get("type"), State: q.Get("status"), Change: q.Get("change")}
	if f.Limit, f.StartingAfter, err = pageParams(q, 1000); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if wantsCSV(c.Request().Header.Get(echo.HeaderAccept)) {
		run, err := s.rec.GetRun(c.Request().Context(), id)
		if err != nil {
			return err
		}
		h := c.Response().Header()
		h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		h.Set("Content-Disposition", `attachment; filename="reconciliation-`+run.Provider+"-"+run.BusinessDate+"-v"+strconv.Itoa(run.Version)+`.csv"`)
		c.Response().WriteHeader(http.StatusOK)
		if err := s.rec.WriteCSV(c.Request().Context(), c.Response(), f); err != nil {
			// Headers are gone: cut the stream so the client sees it broke.
			s.logger.ErrorContext(c.Request().Context(), "csv export failed midway", "error", err)
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	ds, more, err := s.rec.ListDiscrepancies(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(ds, more))
}

func wantsCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(mt), "text/csv") {
			return true
		}
	}
	return false
}

// resolveDiscrepancy: POST /v1/reconciliation/discrepancies/{id}/resolve.
func (s *Server) resolveDiscrepancy(c echo.Context) error {
	var req resolveRequest
	key, fp, err := keyedRequest(c, opResolve, map[string]string{"id": c.Param("id")}, &req)
	if err != nil {
		return err
	}
	id, err := idParam(c, "discrepancy")
	if err != nil {
		return err
	}
	req.Note = strings.TrimSpace(req.Note)
	if req.Note == "" || len(req.Note) > 2000 {
		return orchestrator.ParamError("note", "note must be 1 to 2000 characters")
	}
	p := principal(c)
	return s.idempotent(c, opResolve, key, fp, func(ctx context.Context, _ *orchestrator.Claim) (result, error) {
		d, err := s.rec.Resolve(ctx, id, req.Note, p.KeyID)
		if err != nil {
			return result{}, err
		}
		stored, err := orchestrator.JSONAnswer(http.StatusOK, d, "")
		if err != nil {
			return result{}, err
		}
		return finalResult(stored, ""), nil
	})
}

func idParam(c echo.Context, what string) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, orchestrator.Errorf(orchestrator.CodeNotFound, "no %s %q", what, c.Param("id"))
	}
	return id, nil
}

// intParam parses an optional integer query parameter within [lo, hi];
// absent is 0.
// pageParams reads a list's limit (1 to maxLimit; 0 when absent: the
// list's default) and starting_after (a positive id; 0 when absent).
func pageParams(q url.Values, maxLimit int) (limit int, after int64, err error) {
	if limit, err = intParam(q.Get("limit"), "limit", 1, maxLimit); err != nil {
		return 0, 0, err
	}
	a, err := intParam(q.Get("starting_after"), "starting_after", 1, 1<<62)
	return limit, int64(a), err
}

func intParam(v, name string, lo, hi int) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, orchestrator.ParamError(name, "%s must be a whole number from %d to %d", name, lo, hi)
	}
	return n, nil
}

// getSummary: GET /v1/reconciliation/summary?provider=&business_date=,
// the day's money by currency of the latest succeeded run of it.
func (s *Server) getSummary(c echo.Context) error {
	q := c.QueryParams()
	sum, err := s.rec.DaySummary(c.Request().Context(), q.Get("provider"), q.Get("business_date"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sum)
}

// payoutQueryOf reads a payout page's path and query parameters.
func payoutQueryOf(c echo.Context, after string) (reconcile.PayoutQuery, error) {
	q := reconcile.PayoutQuery{Connector: c.Param("connector"), PayoutID: c.Param("payout_id"),
		StartingAfter: c.QueryParam(after)}
	var err error
	if q.Limit, err = intParam(c.QueryParam("limit"), "limit", 1, 1000); err != nil {
		return q, err
	}
	return q, q.Validate()
}

// getPayout: GET /v1/reconciliation/payouts/{connector}/{payout_id}, a
// page of the payout's items as its connector lists them, each with our
// payment, and the sum check of all of them. It only reads the
// connector's listings (reconcile/payoutview.go): no money moves.
func (s *Server) getPayout(c echo.Context) error {
	q, err := payoutQueryOf(c, "starting_after")
	if err != nil {
		return err
	}
	v, err := s.rec.Payout(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}
