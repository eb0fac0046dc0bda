package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

// consoleDiscrepancyLimit bounds the discrepancies shown on one run page;
// the CSV has them all.
const consoleDiscrepancyLimit = 500

// consoleDiscrepancyDays is how many business days the runs page charts.
const consoleDiscrepancyDays = 30

// runsPage is the data of the runs list.
type runsPage struct {
	Runs  []reconcile.Run
	More  bool
	Older int64
	// Open charts the open discrepancies of the last
	// consoleDiscrepancyDays business days; OpenTotal is their sum.
	Open      svgChart
	OpenTotal int64
}

// consoleRuns: GET /console/runs?before= lists runs, newest first.
func (s *Server) consoleRuns(c echo.Context) error {
	f := reconcile.RunFilter{Limit: 50}
	if v := c.QueryParam("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return s.consoleError(c, orchestrator.ParamError("before", "before must be a run id"))
		}
		f.StartingAfter = n
	}
	runs, more, err := s.rec.ListRuns(c.Request().Context(), f)
	if err != nil {
		return s.consoleError(c, err)
	}
	days, err := s.rec.DiscrepanciesPerDay(c.Request().Context(), consoleDiscrepancyDays)
	if err != nil {
		return s.consoleError(c, err)
	}
	page := runsPage{Runs: runs, More: more}
	if more && len(runs) > 0 {
		page.Older = runs[len(runs)-1].ID
	}
	page.Open, page.OpenTotal = openDiscrepancyChart(days)
	return s.render(c, http.StatusOK, "runs", "Reconciliation runs", page)
}

// openDiscrepancyChart is the bar chart of open discrepancies per business
// day, and their total.
func openDiscrepancyChart(days []reconcile.DayCount) (svgChart, int64) {
	values, titles, labels := make([]float64, len(days)), make([]string, len(days)), make([]string, len(days))
	var total, most int64
	for i, d := range days {
		values[i] = float64(d.Open)
		titles[i] = d.Date + ": " + strconv.FormatInt(d.Open, 10) + " open"
		total += d.Open
		most = max(most, d.Open)
		if (len(days)-1-i)%7 == 0 { // the last day, and a week before each
			labels[i] = d.Date[5:]
		}
	}
	yMax := max(4, niceCeil(float64(most))) // at least whole ticks at 0, 2 and 4
	from, to := "", ""
	if len(days) > 0 {
		from, to = days[0].Date, days[len(days)-1].Date
	}
	return barChart("open-discrepancies", "Open discrepancies per business day, "+from+" to "+to,
		"One bar per business day: the unresolved discrepancies of each provider's latest succeeded run of that day, from 0 to "+
			formatCount(yMax)+".", 720, yMax, formatCount, labels, values, titles), total
}

// runPage is the data of one run's page.
type runPage struct {
	Run reconcile.Run
	// Summary is the run's money by currency; nil when the run did not
	// succeed or its provider reports no money and has no bank account.
	Summary       *reconcile.DaySummary
	Discrepancies []reconcile.Discrepancy
	More          bool
	Category      string
	State         string
	Change        string
	CSRF          string
	// CSVQuery is the current filter as a query string for the CSV link.
	CSVQuery string
	Message  string
	Problem  string
}

func (p runPage) notice() (string, string) { return p.Message, p.Problem }

func runFilterOf(c echo.Context, id int64) reconcile.DiscrepancyFilter {
	return reconcile.DiscrepancyFilter{RunID: id, Category: c.QueryParam("category"),
		State: c.QueryParam("state"), Change: c.QueryParam("change")}
}

// consoleRun: GET /console/runs/{id}?category=&state=&change= shows the
// run's counts, totals, its diff against the previous version and its
// discrepancies, filtered.
func (s *Server) consoleRun(c echo.Context) error {
	id, err := idParam(c, "reconciliation run")
	if err != nil {
		return s.consoleError(c, err)
	}
	page := runPage{}
	if rid := c.QueryParam("resolved"); rid != "" {
		if n, err := strconv.ParseInt(rid, 10, 64); err == nil {
			page.Message = "Discrepancy #" + strconv.FormatInt(n, 10) + " is resolved."
		}
	}
	return s.renderRun(c, http.StatusOK, runFilterOf(c, id), page)
}

func (s *Server) renderRun(c echo.Context, status int, f reconcile.DiscrepancyFilter, page runPage) error {
	if err := f.Validate(); err != nil {
		return s.consoleError(c, err)
	}
	ctx := c.Request().Context()
	run, err := s.rec.GetRun(ctx, f.RunID)
	if err != nil {
		return s.consoleError(c, err)
	}
	f.Limit = consoleDiscrepancyLimit
	ds, more, err := s.rec.ListDiscrepancies(ctx, f)
	if err != nil {
		return s.consoleError(c, err)
	}
	page.Run, page.Discrepancies, page.More = run, ds, more
	if run.Status == "succeeded" && (run.Settlement != nil || run.Bank != nil) {
		sum, err := s.rec.RunSummary(ctx, run)
		if err != nil {
			return s.consoleError(c, err)
		}
		page.Summary = &sum
	}
	page.Category, page.State, page.Change = f.Category, f.State, f.Change
	page.CSRF = consoleSessionOf(c).CSRF
	q := url.Values{}
	for k, v := range map[string]string{"category": f.Category, "state": f.State, "change": f.Change} {
		if v != "" {
			q.Set(k, v)
		}
	}
	page.CSVQuery = q.Encode()
	title := "Run " + strconv.FormatInt(run.ID, 10) + " · " + run.Provider + " " + run.BusinessDate + " v" + strconv.Itoa(run.Version)
	return s.render(c, status, "run", title, page)
}

// consoleRunCSV: GET /console/runs/{id}/discrepancies.csv, the current
// selection as the API's CSV.
func (s *Server) consoleRunCSV(c echo.Context) error {
	id, err := idParam(c, "reconciliation run")
	if err != nil {
		return s.consoleError(c, err)
	}
	f := runFilterOf(c, id)
	if err := f.Validate(); err != nil {
		return s.consoleError(c, err)
	}
	run, err := s.rec.GetRun(c.Request().Context(), id)
	if err != nil {
		return s.consoleError(c, err)
	}
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="reconciliation-`+run.Provider+"-"+run.BusinessDate+"-v"+strconv.Itoa(run.Version)+`.csv"`)
	c.Response().WriteHeader(http.StatusOK)
	if err := s.rec.WriteCSV(c.Request().Context(), c.Response(), f); err != nil {
		s.logger.ErrorContext(c.Request().Context(), "console csv export failed midway", "error", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// consoleResolve: POST /console/discrepancies/{id}/resolve with note. It
// calls the reconciler directly; resubmitting the form is harmless (the
// second resolve is a conflict, shown as a message).
func (s *Server) consoleResolve(c echo.Context) error {
	id, err := idParam(c, "discrepancy")
	if err != nil {
		return s.consoleError(c, err)
	}
	ctx := c.Request().Context()
	d, err := s.rec.GetDiscrepancy(ctx, id)
	if err != nil {
		return s.consoleError(c, err)
	}
	back := reconcile.DiscrepancyFilter{RunID: d.RunID, Category: c.FormValue("category"),
		State: c.FormValue("state"), Change: c.FormValue("change")}
	if back.Validate() != nil {
		back = reconcile.DiscrepancyFilter{RunID: d.RunID}
	}
	note := strings.TrimSpace(c.FormValue("note"))
	_, err = s.rec.Resolve(ctx, id, note, consoleSessionOf(c).Principal.KeyID)
	switch orchestrator.ErrorCode(err) {
	case "":
		q := url.Values{"resolved": {strconv.FormatInt(id, 10)}}
		for k, v := range map[string]string{"category": back.Category, "state": back.State, "change": back.Change} {
			if v != "" {
				q.Set(k, v)
			}
		}
		return c.Redirect(http.StatusSeeOther, consolePrefix+"/runs/"+strconv.FormatInt(d.RunID, 10)+"?"+q.Encode())
	case orchestrator.CodeConflict:
		return s.renderRun(c, http.StatusConflict, back, runPage{Problem: "Discrepancy #" + strconv.FormatInt(id, 10) + " was already resolved."})
	case orchestrator.CodeValidationFailed:
		return s.renderRun(c, http.StatusBadRequest, back, runPage{Problem: "Write a note of 1 to 2000 characters to resolve discrepancy #" + strconv.FormatInt(id, 10) + "."})
	}
	return s.consoleError(c, err)
}
