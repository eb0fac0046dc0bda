package httpapi

import "github.com/labstack/echo/v4"

// ConsoleRoutes is the console router's route table, for tests that must
// cover every route.
func ConsoleRoutes(s *Server) []*echo.Route { return s.console.router.Routes() }

// PaymentBadges is the console's badge of each payment state.
var PaymentBadges = paymentBadges
