package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/reconcile"
)

// The web console (SPEC: Web console): server-rendered pages under
// /console/, signed in with an API key, with a server-side session in
// PostgreSQL (table console_sessions) and a CSRF token on every form. It
// needs no JavaScript. Its handlers render their own HTML error pages and
// never return an error to the JSON API's problem+json handler.

//go:embed console/templates/*.html console/static/*.css
var consoleFiles embed.FS

const (
	consolePrefix = "/console"
	// sessionCookie holds the session token; only its SHA-256 is stored
	// (orchestrator.ConsoleSession).
	sessionCookie = "payorch_session"
	// signinCookie holds the pre-session CSRF token of the sign-in form
	// (double-submit).
	signinCookie = "payorch_signin"
	// csrfField is the hidden form field of every form.
	csrfField = "csrf_token"
	// sessionLifetime is how long a console session lasts.
	sessionLifetime   = 8 * time.Hour
	consoleSessionKey = "payorch.console_session"
)

// console holds the parsed templates, one template set per page (each
// with the shared layout), and the console's own router: its routes are
// not the JSON API's and stay out of the API's route table.
type console struct {
	pages  map[string]*template.Template
	router *echo.Echo
}

func parseConsolePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"money":      formatMinor,
		"badge":      statusBadge,
		"time":       formatTime,
		"timep":      formatTimePtr,
		"deref":      derefString,
		"derefInt":   derefInt,
		"json":       compactJSON,
		"ms":         formatMillis,
		"dvalue":     discrepancyValue,
		"minor":      func(p *int64) int64 { return *p },
		"categories": discrepancyCategories,
		"share":      formatShareP,
		"msp":        formatMSP,
		"bp":         formatBP,
		"attempt":    eventAttempt,
		"detail":     eventDetail,
		"opchange":   operationChange,
		"routing":    routingText,
		"expiresIn":  expiresIn,
		"payoutLink": discrepancyPayout,
		"moneyp":     moneyPtr,
		"moneyCats":  func() []string { return reconcile.MoneyCategories },
	}
	// Every page has the layout and the shared partials (chart.html).
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles,
		"console/templates/layout.html", "console/templates/chart.html"))
	pages := map[string]*template.Template{}
	names, err := fs.Glob(consoleFiles, "console/templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, n := range names {
		base := strings.TrimPrefix(n, "console/templates/")
		if base == "layout.html" || base == "chart.html" {
			continue
		}
		pages[strings.TrimSuffix(base, ".html")] = template.Must(template.Must(layout.Clone()).ParseFS(consoleFiles, n))
	}
	return pages
}

// consoleOr is the server-wide middleware that serves /console and
// /console/… from the console's router (behind the request id, tracing,
// access log, recovery and body limit that come before it) and passes
// every other request to apiMW, then the API's routes.
func (s *Server) consoleOr(apiMW echo.MiddlewareFunc) echo.MiddlewareFunc {
	s.console = &console{pages: parseConsolePages(), router: s.consoleRouter()}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		api := apiMW(next)
		return func(c echo.Context) error {
			if p := c.Request().URL.Path; p != consolePrefix && !strings.HasPrefix(p, consolePrefix+"/") {
				return api(c)
			}
			req := c.Request()
			s.console.router.ServeHTTP(c.Response(), req.WithContext(context.WithValue(req.Context(), outerContextKey{}, c)))
			return nil
		}
	}
}

// outerContextKey carries the server's echo.Context into the console's
// router, so the metrics, the span and the access log learn the console's
// route template and the error code.
type outerContextKey struct{}

func (s *Server) consoleRouter() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	e.IPExtractor = s.echo.IPExtractor
	e.SchemeExtractor = s.echo.SchemeExtractor
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if !c.Response().Committed {
			_ = s.consoleError(c, err)
		}
	}
	e.Use(
		func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				err := next(c)
				if outer, ok := c.Request().Context().Value(outerContextKey{}).(echo.Context); ok {
					outer.SetPath(c.Path())
					if code := c.Get(errorCodeKey); code != nil {
						outer.Set(errorCodeKey, code)
					}
				}
				return err
			}
		},
		middleware.RecoverWithConfig(middleware.RecoverConfig{
			LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
				s.logger.ErrorContext(c.Request().Context(), "panic", "error", err, "stack", string(stack))
				return err
			},
		}),
		consoleHeaders,
		checkParams,
	)
	e.GET(consolePrefix, func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, consolePrefix+"/") })
	g := e.Group(consolePrefix)
	g.GET("/static/console.css", s.consoleCSS)
	g.GET("/signin", s.consoleSignInForm)
	g.POST("/signin", s.consoleSignIn)

	a := g.Group("", s.consoleAuth)
	a.GET("/", s.consoleHome)
	a.POST("/signout", s.consoleSignOut)
	readers := s.consoleRole(orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance)
	a.GET("/search", s.consoleSearch, readers)
	a.GET("/payments/:id", s.consolePayment, readers)
	a.GET("/holds", s.consoleHolds, readers)
	a.GET("/connectors", s.consoleConnectors, s.consoleRole(connectorViewers...))
	admin := s.consoleRole(orchestrator.RoleAdmin)
	a.GET("/tenants", s.consoleTenants, admin)
	a.GET("/tenants/:id", s.consoleTenant, admin)
	if s.rec != nil {
		finance := s.consoleRole(orchestrator.RoleFinance, orchestrator.RoleAdmin)
		a.GET("/runs", s.consoleRuns, finance)
		a.GET("/runs/:id", s.consoleRun, finance)
		a.GET("/runs/:id/discrepancies.csv", s.consoleRunCSV, finance)
		a.POST("/discrepancies/:id/resolve", s.consoleResolve, finance)
		a.GET("/payouts/:connector/:payout_id", s.consolePayout, finance)
	}
	notFound := func(c echo.Context) error {
		// No route template: the request is "unmatched" in metrics, like
		// the API's unknown paths, and never labelled with its raw path.
		c.SetPath("")
		return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeNotFound, "There is no such page."))
	}
	e.RouteNotFound("/*", notFound)
	g.RouteNotFound("/*", notFound)
	return e
}

// consoleHeaders keeps console pages out of caches and frames and allows
// no script at all.
func consoleHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		return next(c)
	}
}

func (s *Server) consoleCSS(c echo.Context) error {
	b, err := consoleFiles.ReadFile("console/static/console.css")
	if err != nil {
		return s.consoleError(c, err)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "text/css; charset=utf-8", b)
}

// pageData is what every page template gets.
type pageData struct {
	Title   string
	Session *orchestrator.ConsoleSession
	// Nav flags which sections the user's role may see.
	CanPayments   bool
	CanFinance    bool
	CanConnectors bool
	CanAdmin      bool
	Notice        string
	Error         string
	Page          any
}

// render writes page with status; a template failure is an error page.
func (s *Server) render(c echo.Context, status int, page, title string, data any) error {
	sess := consoleSessionOf(c)
	pd := pageData{Title: title, Session: sess, Page: data}
	if sess != nil {
		pd.CanPayments = consoleAllowed(sess.Principal.Role, orchestrator.RoleMerchant, orchestrator.RoleSupport, orchestrator.RoleFinance)
		pd.CanFinance = s.rec != nil && consoleAllowed(sess.Principal.Role, orchestrator.RoleFinance, orchestrator.RoleAdmin)
		pd.CanConnectors = consoleAllowed(sess.Principal.Role, connectorViewers...)
		pd.CanAdmin = sess.Principal.Role == orchestrator.RoleAdmin
	}
	if n, ok := data.(interface{ notice() (string, string) }); ok {
		pd.Notice, pd.Error = n.notice()
	}
	var buf bytes.Buffer
	t, ok := s.console.pages[page]
	if !ok {
		return s.consoleError(c, errors.New("console: no template "+page))
	}
	if err := t.ExecuteTemplate(&buf, "layout.html", pd); err != nil {
		if page == "error" {
			s.logger.ErrorContext(c.Request().Context(), "console error page", "error", err)
			return c.String(http.StatusInternalServerError, "internal error")
		}
		return s.consoleError(c, err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// errorPage is the data of the error template.
type errorPage struct {
	Status    int
	Title     string
	Detail    string
	RequestID string
}

// consoleError renders err as an HTML error page with the status of the
// API's code table; internal errors are logged and shown without detail.
func (s *Server) consoleError(c echo.Context, err error) error {
	e, internal := problemFor(err)
	c.Set(errorCodeKey, e.Code)
	p := s.problem(c, e)
	if internal {
		s.logger.ErrorContext(c.Request().Context(), "internal error", "error", err)
		p.Detail = "Something went wrong on our side. Quote the request id to support."
	}
	return s.render(c, p.Status, "error", p.Title, errorPage{Status: p.Status, Title: p.Title, Detail: p.Detail, RequestID: p.RequestID})
}

// randomToken returns 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// postedCSRF is the CSRF token of a posted form: from the request body
// only, never the query string (c.FormValue would take either, and a token
// in a URL leaks through logs, history and Referer).
func postedCSRF(c echo.Context) string {
	return c.Request().PostFormValue(csrfField)
}

func sameToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// consoleCookie builds a console cookie: HttpOnly, SameSite=Strict,
// scoped to /console/, and Secure when the public URL is https, when Serve
// serves TLS, or when the request came over HTTPS (its own TLS, or a
// trusted proxy's X-Forwarded-Proto).
func (s *Server) consoleCookie(c echo.Context, name, value string, expires time.Time) *http.Cookie {
	ck := &http.Cookie{Name: name, Value: value, Path: consolePrefix + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secureCookies || c.Scheme() == "https"}
	if value == "" {
		ck.MaxAge = -1
	} else if !expires.IsZero() {
		ck.Expires = expires.UTC()
		ck.MaxAge = int(time.Until(expires).Seconds())
	}
	return ck
}

// consoleAuth loads the session named by the cookie: an unknown, expired,
// signed-out session, or one whose API key was revoked, sends GETs to the
// sign-in page. Every POST must carry the session's CSRF token.
func (s *Server) consoleAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		var sess *orchestrator.ConsoleSession
		if ck, err := c.Cookie(sessionCookie); err == nil && ck.Value != "" {
			var lerr error
			sess, lerr = s.svc.ConsoleSession(c.Request().Context(), ck.Value)
			if orchestrator.ErrorCode(lerr) == orchestrator.CodeUnauthorized {
				sess = nil // no live session: as if there were no cookie
			} else if lerr != nil {
				return s.consoleError(c, lerr)
			}
		}
		if sess == nil {
			if c.Request().Method == http.MethodGet || c.Request().Method == http.MethodHead {
				c.SetCookie(s.consoleCookie(c, sessionCookie, "", time.Time{}))
				return c.Redirect(http.StatusSeeOther, consolePrefix+"/signin")
			}
			return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeUnauthorized, "Your session has ended. Sign in again."))
		}
		c.Set(consoleSessionKey, sess)
		if c.Request().Method == http.MethodPost && !sameToken(postedCSRF(c), sess.CSRF) {
			return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeForbidden,
				"The form's security token is missing or out of date. Go back, reload the page and try again."))
		}
		return next(c)
	}
}

func consoleSessionOf(c echo.Context) *orchestrator.ConsoleSession {
	sess, _ := c.Get(consoleSessionKey).(*orchestrator.ConsoleSession)
	return sess
}

func consoleAllowed(r orchestrator.Role, roles ...orchestrator.Role) bool {
	for _, x := range roles {
		if r == x {
			return true
		}
	}
	return false
}

// consoleRole is requireRole for pages: a forbidden page instead of a
// problem.
func (s *Server) consoleRole(roles ...orchestrator.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if sess := consoleSessionOf(c); sess == nil || !consoleAllowed(sess.Principal.Role, roles...) {
				role := orchestrator.Role("signed-out")
				if sess != nil {
					role = sess.Principal.Role
				}
				return s.consoleError(c, orchestrator.Errorf(orchestrator.CodeForbidden, "A %s key may not see this page.", role))
			}
			return next(c)
		}
	}
}
