package httpapi

import (
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
)

// maxParamBytes bounds one query or path parameter, its name or its
// value: more than any parameter of the API or the console needs (an
// idempotency key is at most 255 characters).
const maxParamBytes = 1024

// checkParams refuses, before any handler reads them, the request
// parameters no handler can use and PostgreSQL cannot store: a query
// string that is not valid URL encoding; a query parameter, path parameter
// or form field (of a form body) whose name or value is not valid UTF-8 or
// holds the NUL character; a query or path parameter longer than
// maxParamBytes (form fields are bounded by the body limit and by their
// handlers). The JSON API and the console both run it; JSON bodies are
// checked by keyedRequest. Errors: validation_failed naming the
// parameter, body_too_large (a form body).
func checkParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if err := checkQuery(req.URL.RawQuery); err != nil {
			return err
		}
		values := c.ParamValues()
		for i, name := range c.ParamNames() {
			if i < len(values) {
				if err := checkParam(name, values[i], maxParamBytes); err != nil {
					return err
				}
			}
		}
		if isFormBody(req) {
			form, err := c.FormParams()
			if err != nil {
				var he *echo.HTTPError
				if errors.As(err, &he) {
					return err // the body limit's 413: body_too_large
				}
				return &orchestrator.Error{Code: orchestrator.CodeValidationFailed, Message: "the form body is malformed"}
			}
			for name, vals := range form {
				for _, v := range vals {
					if err := checkParam(name, v, 0); err != nil {
						return err
					}
				}
			}
		}
		return next(c)
	}
}

// checkQuery checks every name=value pair of a raw query string; unlike
// url.ParseQuery it says which parameter is wrong, and unlike the lenient
// parse Echo does it drops none.
func checkQuery(raw string) error {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return orchestrator.ParamError(orchestrator.FieldName(rawName), "the query string is not valid URL encoding")
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return orchestrator.ParamError(orchestrator.FieldName(name), "%s is not valid URL encoding", orchestrator.FieldName(name))
		}
		if err := checkParam(name, value, maxParamBytes); err != nil {
			return err
		}
	}
	return nil
}

// checkParam checks one parameter's name and value; limit 0 means no
// length limit.
func checkParam(name, value string, limit int) error {
	p := orchestrator.FieldName(name)
	switch {
	case !orchestrator.ValidText(name):
		return orchestrator.ParamError(p, "parameter names must be UTF-8 text without NUL characters")
	case limit > 0 && len(name) > limit:
		return orchestrator.ParamError(p, "parameter names must be at most %d bytes long", limit)
	case !orchestrator.ValidText(value):
		return orchestrator.ParamError(p, "%s must be UTF-8 text without NUL characters", p)
	case limit > 0 && len(value) > limit:
		return orchestrator.ParamError(p, "%s must be at most %d bytes long", p, limit)
	}
	return nil
}

// isFormBody reports whether req carries an HTML form in its body.
func isFormBody(req *http.Request) bool {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return false
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
	return mt == "application/x-www-form-urlencoded" || mt == echo.MIMEMultipartForm
}
