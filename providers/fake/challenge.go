package fake

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bojanz/currency"

	"github.com/payorch/payorch/providers"
)

// The 3-D Secure challenge page: GET /3ds/{ref}?token=… shows the payment
// with two buttons, Complete and Fail, which POST /3ds/{ref} (token and
// result in the form); the answer is a 303 to the hold's return_url with
// payment_intent and redirect_status appended, as Stripe's redirect does.
// The pages need no bearer token (the shopper's browser has none): the
// per-hold token in the URL is their only key, so a wrong token and an
// unknown hold give the same 404. They show the card's brand and last
// four digits at most.

// challengeCSS is the pages' only style; the Content-Security-Policy
// allows it by its hash and nothing else (no scripts, images or frames).
const challengeCSS = `body{font:16px/1.5 system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem;color:#1a1a1a}` +
	`h1{font-size:1.3rem}dl{display:grid;grid-template-columns:auto 1fr;gap:.25rem 1rem}dt{color:#555}dd{margin:0}` +
	`form{display:flex;gap:1rem;margin-top:1.5rem}button{font:inherit;padding:.5rem 1.5rem;border-radius:.3rem;border:1px solid #888;cursor:pointer}` +
	`button[value=complete]{background:#1a7f37;color:#fff;border-color:#1a7f37}button[value=fail]{background:#fff;color:#b42318}` +
	`.note{color:#555;font-size:.9rem}`

// challengeStyleSrc is the CSP source that allows challengeCSS.
var challengeStyleSrc = func() string {
	sum := sha256.Sum256([]byte(challengeCSS))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

var challengeTemplate = template.Must(template.New("challenge").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{.Title}} · payorch fake provider</title><style>` + challengeCSS + `</style></head>
<body><h1>{{.Title}}</h1>
{{if .Ref}}<dl><dt>Amount</dt><dd>{{.Amount}}</dd><dt>Merchant</dt><dd>{{.Description}}</dd>
{{if .Card}}<dt>Card</dt><dd>{{.Card}}</dd>{{end}}{{if .PaymentMethod}}<dt>Payment method</dt><dd>{{.PaymentMethod}}</dd>{{end}}
<dt>Reference</dt><dd>{{.Ref}}</dd></dl>{{end}}
<p>{{.Message}}</p>
{{if .Waiting}}<form method="post" action="{{.Ref}}"><input type="hidden" name="token" value="{{.Token}}">
<button type="submit" name="result" value="complete">Complete</button>
<button type="submit" name="result" value="fail">Fail</button></form>
<p class="note">A 3-D Secure test challenge of payorch's fake provider: no bank is asked.</p>{{end}}
{{if .ReturnLink}}<p><a href="{{.ReturnLink}}">Return to the merchant</a></p>{{end}}
</body></html>
`))

// challengePage is what the template shows.
type challengePage struct {
	Title, Message string
	// Set for a known hold only.
	Ref, Amount, Description, Card, PaymentMethod string
	// Waiting shows the form, with Token.
	Waiting bool
	Token   string
	// ReturnLink goes back to the merchant after a completed challenge.
	ReturnLink string
	// formAction is the origin the form's redirect goes to (the return
	// URL's), which the CSP must allow.
	formAction string
}

// pageLocked is the page of h's challenge as it stands. Called with s.mu
// held.
func (s *Server) pageLocked(h *hold) challengePage {
	p := challengePage{Ref: h.ref, Amount: displayAmount(h.amount, h.currency), Description: h.description}
	if p.Description == "" {
		p.Description = "A payment of payorch's fake provider"
	}
	if h.card != nil {
		p.Card = h.card.Brand + " •••• " + h.card.Last4
	} else {
		p.PaymentMethod = h.paymentMethod
	}
	switch {
	case h.status == providers.StatusRequiresAction:
		p.Title, p.Message, p.Waiting, p.Token = "Authenticate this payment", "Your bank asks you to confirm this payment.", true, h.challengeToken
		p.formAction = originOf(h.returnURL)
	case h.authResult == authSucceeded:
		p.Title, p.Message, p.ReturnLink = "Payment authenticated", "This payment was authenticated.", h.returnTo()
	case h.authResult == authFailed:
		p.Title, p.Message, p.ReturnLink = "Authentication failed", "The authentication of this payment failed.", h.returnTo()
	default:
		p.Title, p.Message = "Authentication expired", "This authentication has expired: the payment was canceled."
	}
	return p
}

// handleChallengePage serves GET /3ds/{ref}?token=….
func (s *Server) handleChallengePage(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.challengeOf(r.PathValue("ref"), r.URL.Query().Get("token"))
	var p challengePage
	if h != nil {
		p = s.pageLocked(h)
	}
	s.mu.Unlock()
	if h == nil {
		writeNoChallenge(w)
		return
	}
	writePage(w, http.StatusOK, p)
}

// maxChallengeForm bounds the body of a challenge page's form.
const maxChallengeForm = 4 << 10

// handleChallengeSubmit serves POST /3ds/{ref} (form: token, result): the
// challenge completed or failed, once; then the shopper goes back to the
// return URL. A second submission changes nothing and redirects again; one
// after the hold was canceled says the challenge expired.
func (s *Server) handleChallengeSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxChallengeForm)
	if err := r.ParseForm(); err != nil {
		writePage(w, http.StatusBadRequest, challengePage{Title: "Bad request", Message: "This form could not be read."})
		return
	}
	result := r.PostForm.Get("result")
	s.mu.Lock()
	h := s.challengeOf(r.PathValue("ref"), r.PostForm.Get("token"))
	if h == nil {
		s.mu.Unlock()
		writeNoChallenge(w)
		return
	}
	if result != resultComplete && result != resultFail {
		p := s.pageLocked(h)
		s.mu.Unlock()
		p.Message = "Choose Complete or Fail."
		writePage(w, http.StatusBadRequest, p)
		return
	}
	s.completeChallengeLocked(s.now(), h, result == resultComplete)
	done, to, p := h.authResult != "", h.returnTo(), s.pageLocked(h)
	s.mu.Unlock()
	if !done || to == "" {
		writePage(w, http.StatusGone, p)
		return
	}
	pageHeaders(w.Header(), "")
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// writeNoChallenge answers a wrong token or an unknown hold alike.
func writeNoChallenge(w http.ResponseWriter) {
	writePage(w, http.StatusNotFound, challengePage{Title: "No such authentication",
		Message: "This authentication link is not valid."})
}

// writePage renders p with status.
func writePage(w http.ResponseWriter, status int, p challengePage) {
	var b bytes.Buffer
	if err := challengeTemplate.Execute(&b, p); err != nil {
		// The template and its data are our own; a failure is a bug.
		panic("fake: challenge page: " + err.Error())
	}
	pageHeaders(w.Header(), p.formAction)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// pageHeaders sets the headers of every challenge page answer: nothing
// but the page's own style may load, it may not be framed, it is not
// cached, and its URL (with the token) is never sent as a Referer. The
// form may post to the page itself and, because browsers apply
// form-action to the redirect that follows, lead to returnOrigin.
func pageHeaders(h http.Header, returnOrigin string) {
	formAction := "'self'"
	if returnOrigin != "" {
		formAction += " " + returnOrigin
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src "+challengeStyleSrc+"; form-action "+formAction+
		"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// originOf is the origin of a validated return URL (checkReturnURL keeps
// its host to characters a CSP source can hold).
func originOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || !cspSafeHost(u.Host) {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// cspSafeHost reports whether host (with its port) holds only letters,
// digits, dots, hyphens, colons and brackets (an IPv6 literal): nothing
// that could end a CSP source.
func cspSafeHost(host string) bool {
	return host != "" && strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == ""
}

// displayAmount writes minor units with the currency's decimal digits
// (JPY 0, EUR 2, KWD 3) and its code. Integer arithmetic only.
func displayAmount(minor int64, code string) string {
	digits, ok := currency.GetDigits(code)
	if !ok {
		digits = 2
	}
	s := strconv.FormatInt(minor, 10)
	if digits > 0 {
		if len(s) <= int(digits) {
			s = strings.Repeat("0", int(digits)-len(s)+1) + s
		}
		s = s[:len(s)-int(digits)] + "." + s[len(s)-int(digits):]
	}
	return s + " " + code
}
