package httpapi

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooks"
)

// Webhook endpoints and deliveries: merchants register the
// URLs their events are delivered to, finance (and admin, as for
// reconciliation) the staff endpoints that receive the reconciliation
// events, and merchants and support read an event's deliveries and send it
// again. Every POST is keyed like the others; the answers of create and
// rotate_secret carry the endpoint's signing secret, so a replay of one
// (within the key's lifetime) shows that secret again, to the same tenant
// (or, for staff, the same API key) only.

// The keyed operations of this file.
const (
	opCreateWebhookEndpoint = "POST /v1/webhook_endpoints"
	opUpdateWebhookEndpoint = "POST /v1/webhook_endpoints/{id}"
	opRotateWebhookSecret   = "POST /v1/webhook_endpoints/{id}/rotate_secret"
	opRedeliverEvent        = "POST /v1/events/{id}/redeliver"
)

// updateWebhookEndpointRequest is the body of POST /v1/webhook_endpoints/{id}.
type updateWebhookEndpointRequest struct {
	Enabled *bool `json:"enabled"`
}

// webhookEndpointLocation is the URL of endpoint id.
func webhookEndpointLocation(id string) string { return "/v1/webhook_endpoints/" + id }

// endpointID is the {id} of an endpoint route, checked for shape before
// anything is claimed or read. Errors: not_found.
func endpointID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !webhooks.ValidWebhookEndpointID(id) {
		return "", orchestrator.Errorf(orchestrator.CodeNotFound, "no webhook endpoint %s", strconv.Quote(id))
	}
	return id, nil
}

// eventID is the {id} of an event route, checked for shape. Errors:
// not_found.
func eventID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !orchestrator.ValidEventID(id) {
		return "", orchestrator.Errorf(orchestrator.CodeNotFound, "no event %s", strconv.Quote(id))
	}
	return id, nil
}

// keyedJSON runs exec under the idempotency protocol and stores its value
// as the final answer, with status (and location, if any).
func (s *Server) keyedJSON(c echo.Context, op, key string, fp orchestrator.Fingerprint, status int, location func(v any) string,
	exec func(ctx context.Context) (any, error)) error {
	return s.idempotent(c, op, key, fp, func(ctx context.Context, _ *orchestrator.Claim) (result, error) {
		v, err := exec(ctx)
		if err != nil {
			return result{}, err
		}
		loc := ""
		if location != nil {
			loc = location(v)
		}
		stored, err := orchestrator.JSONAnswer(status, v, loc)
		if err != nil {
			return result{}, err
		}
		return finalResult(stored, ""), nil
	})
}

// endpointOwner is the tenant whose endpoints p manages: a merchant's own,
// or 0 (the staff endpoints) for finance and admin.
func endpointOwner(p orchestrator.Principal) int64 {
	if p.Role == orchestrator.RoleMerchant {
		return p.TenantID
	}
	return 0
}

// createWebhookEndpoint: POST /v1/webhook_endpoints (merchant: for its
// tenant; finance, admin: a staff endpoint, for the staff event types
// only): 201 with the endpoint and its secret. Errors: validation_failed
// naming the field, conflict (already MaxWebhookEndpoints), and the keyed
// POST's.
func (s *Server) createWebhookEndpoint(c echo.Context) error {
	var in webhooks.WebhookEndpointInput
	key, fp, err := keyedRequest(c, opCreateWebhookEndpoint, nil, &in)
	if err != nil {
		return err
	}
	p := principal(c)
	owner := endpointOwner(p)
	if err := s.hooks.ValidateWebhookEndpoint(owner, in); err != nil { // before the key is claimed
		return err
	}
	return s.keyedJSON(c, opCreateWebhookEndpoint, key, fp, http.StatusCreated,
		func(v any) string { return webhookEndpointLocation(v.(webhooks.WebhookEndpoint).ID) },
		func(ctx context.Context) (any, error) {
			return s.hooks.CreateWebhookEndpoint(ctx, owner, in, p.KeyID)
		})
}

// listWebhookEndpoints: GET /v1/webhook_endpoints (merchant: the tenant's
// endpoints; finance, admin: the staff endpoints, their URLs redacted:
// orchestrator.Scope.FullEndpointURLs), oldest first, without their
// secrets.
func (s *Server) listWebhookEndpoints(c echo.Context) error {
	eps, err := s.hooks.ListWebhookEndpoints(c.Request().Context(), orchestrator.ScopeOf(principal(c)))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(eps, false))
}

// getWebhookEndpoint: GET /v1/webhook_endpoints/{id} (its owner), without
// its secret. Errors: not_found.
func (s *Server) getWebhookEndpoint(c echo.Context) error {
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	ep, err := s.hooks.GetWebhookEndpoint(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ep)
}

// updateWebhookEndpoint: POST /v1/webhook_endpoints/{id} (its owner) with
// {"enabled": true|false}. Errors: validation_failed, not_found.
func (s *Server) updateWebhookEndpoint(c echo.Context) error {
	var req updateWebhookEndpointRequest
	key, fp, err := keyedRequest(c, opUpdateWebhookEndpoint, map[string]string{"id": c.Param("id")}, &req)
	if err != nil {
		return err
	}
	if req.Enabled == nil {
		return orchestrator.ParamError("enabled", "enabled is required: true or false")
	}
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	sc := orchestrator.ScopeOf(principal(c))
	return s.keyedJSON(c, opUpdateWebhookEndpoint, key, fp, http.StatusOK, nil, func(ctx context.Context) (any, error) {
		return s.hooks.UpdateWebhookEndpoint(ctx, sc, id, *req.Enabled)
	})
}

// rotateWebhookSecret: POST /v1/webhook_endpoints/{id}/rotate_secret
// (its owner), body empty or {}: 200 with the endpoint and its new secret.
// Errors: not_found.
func (s *Server) rotateWebhookSecret(c echo.Context) error {
	key, fp, err := keyedRequest(c, opRotateWebhookSecret, map[string]string{"id": c.Param("id")}, &emptyRequest{})
	if err != nil {
		return err
	}
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	sc := orchestrator.ScopeOf(principal(c))
	return s.keyedJSON(c, opRotateWebhookSecret, key, fp, http.StatusOK, nil, func(ctx context.Context) (any, error) {
		return s.hooks.RotateWebhookSecret(ctx, sc, id)
	})
}

// deleteWebhookEndpoint: DELETE /v1/webhook_endpoints/{id} (its owner): 200
// with the endpoint, deleted. It takes no query parameters. Errors:
// validation_failed (a query parameter), not_found.
func (s *Server) deleteWebhookEndpoint(c echo.Context) error {
	if q := c.QueryParams(); len(q) > 0 {
		names := slices.Sorted(maps.Keys(q))
		return orchestrator.ParamError(names[0], "DELETE takes no query parameters")
	}
	id, err := endpointID(c)
	if err != nil {
		return err
	}
	ep, err := s.hooks.DeleteWebhookEndpoint(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ep)
}

// eventDeliveries: GET /v1/events/{id}/deliveries (merchant: own; support:
// every merchant's; finance, admin: the staff events'):
// one delivery per endpoint, with its attempts; endpoint_url is whole for
// the merchant only (orchestrator.Scope.FullEndpointURLs). Errors:
// not_found.
func (s *Server) eventDeliveries(c echo.Context) error {
	id, err := eventID(c)
	if err != nil {
		return err
	}
	ds, err := s.hooks.EventDeliveries(c.Request().Context(), orchestrator.ScopeOf(principal(c)), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(ds, false))
}

// redeliverEvent: POST /v1/events/{id}/redeliver (the owner of its
// endpoints: merchant, or finance and admin for a staff event; not
// support, whose role reads: webhooks.Service.RedeliverEvent), body empty or
// {}: 200 with the event's deliveries, pending again. Errors: not_found,
// forbidden.
func (s *Server) redeliverEvent(c echo.Context) error {
	key, fp, err := keyedRequest(c, opRedeliverEvent, map[string]string{"id": c.Param("id")}, &emptyRequest{})
	if err != nil {
		return err
	}
	id, err := eventID(c)
	if err != nil {
		return err
	}
	sc := orchestrator.ScopeOf(principal(c))
	return s.keyedJSON(c, opRedeliverEvent, key, fp, http.StatusOK, nil, func(ctx context.Context) (any, error) {
		ds, err := s.hooks.RedeliverEvent(ctx, sc, id)
		if err != nil {
			return nil, err
		}
		return newList(ds, false), nil
	})
}
