package httpapi

import (
	_ "embed"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
)

// openAPIDoc is the OpenAPI 3 document of every route, parameter, header,
// schema and problem code of the API; openapi_test.go holds the server to
// it.
//
//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI 3 document (YAML), as served at
// GET /openapi.yaml.
func OpenAPI() []byte { return slices.Clone(openAPIDoc) }

// openAPI: GET /openapi.yaml, no authentication.
func (s *Server) openAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/yaml", openAPIDoc)
}
