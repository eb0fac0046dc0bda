package httpapi

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/vault"
)

// The payment methods API: cards vaulted by payorch (orchestrator/vault),
// which every connector can charge. Merchant keys create, read, list and
// delete their tenant's methods; support reads any tenant's, naming it
// (tenant_id), as it reads payments; publishable keys only create
// (publishable.go). No answer, stored answer, problem or log line ever
// holds a card's number or CVC: the idempotency fingerprint of a create is
// taken over the request with both blinded (vault.Vault.Blind, an HMAC
// under a secret key, where a plain hash of a number could be reversed by
// trying every number), and no error quotes a value.
//
// Without a vault (Config.Vault nil) the routes exist and answer 503
// service_unavailable, so clients learn why rather than a 404.

// The keyed operations of this file. A publishable key's creates are an
// operation of their own, and their vault keys a namespace of their own
// (vaultKey), so that a public key can neither replay an answer stored for
// the merchant's server nor take an Idempotency-Key the merchant's server
// is going to use.
const (
	opCreatePaymentMethod            = "POST /v1/payment_methods"
	opCreatePaymentMethodPublishable = "POST /v1/payment_methods (publishable)"
)

// createPaymentMethodRequest is the body of POST /v1/payment_methods.
type createPaymentMethodRequest struct {
	Type           string                `json:"type"`
	Card           *vault.CardInput      `json:"card"`
	BillingDetails *vault.BillingDetails `json:"billing_details,omitempty"`
	Metadata       map[string]string     `json:"metadata,omitempty"`
}

// publishableCard and publishableMethod are what a publishable key's
// create answers: the method without its card's fingerprint, which
// would let whoever holds the public key tell whether two numbers it
// tries are the same card as one the merchant holds.
type publishableCard struct {
	Brand    string `json:"brand"`
	Last4    string `json:"last4"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  int    `json:"exp_year"`
	Funding  string `json:"funding,omitempty"`
}

type publishableMethod struct {
	ID             string                `json:"id"`
	Object         string                `json:"object"`
	Type           string                `json:"type"`
	Card           publishableCard       `json:"card"`
	BillingDetails *vault.BillingDetails `json:"billing_details"`
	Metadata       map[string]string     `json:"metadata"`
	CreatedAt      time.Time             `json:"created_at"`
}

func publishableView(pm vault.PaymentMethod) publishableMethod {
	return publishableMethod{ID: pm.ID, Object: pm.Object, Type: pm.Type, BillingDetails: pm.BillingDetails,
		Metadata: pm.Metadata, CreatedAt: pm.CreatedAt,
		Card: publishableCard{Brand: pm.Card.Brand, Last4: pm.Card.Last4, ExpMonth: pm.Card.ExpMonth,
			ExpYear: pm.Card.ExpYear, Funding: pm.Card.Funding}}
}

// paymentMethodLocation is the URL of payment method id.
func paymentMethodLocation(id string) string { return routePaymentMethods + "/" + id }

// requireVault answers 503 when this server has no vault. Errors:
// service_unavailable.
func (s *Server) requireVault(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.vault == nil {
			return orchestrator.Errorf(orchestrator.CodeUnavailable,
				"the payment method vault is not configured on this server (PAYORCH_VAULT_KEYS)")
		}
		return next(c)
	}
}

// cardRequest reads a create's Idempotency-Key and body (decodeStrict:
// a field of the wrong type is named, its value never quoted) and
// fingerprints the request with its card number and CVC blinded.
// Errors: idempotency_key_missing, idempotency_key_invalid,
// body_too_large, validation_failed.
func (s *Server) cardRequest(c echo.Context, op string, req *createPaymentMethodRequest) (string, orchestrator.Fingerprint, error) {
	var fp orchestrator.Fingerprint
	key, err := idempotencyKey(c)
	if err != nil {
		return "", fp, err
	}
	raw, err := readBody(c)
	if err != nil {
		return "", fp, err
	}
	if err := decodeStrict(raw, req); err != nil {
		return "", fp, err
	}
	// The request as decoded (every field it may hold: unknown ones are
	// refused), re-encoded with the secrets blinded: two bodies are the
	// same request exactly when they decode alike.
	blinded := *req
	if req.Card != nil {
		card := *req.Card
		card.Number = s.vault.Blind(card.Number)
		if card.CVC != "" {
			card.CVC = s.vault.Blind(card.CVC)
		}
		blinded.Card = &card
	}
	body, err := json.Marshal(blinded)
	if err != nil {
		return "", fp, orchestrator.Internalf("encode blinded request: %w", err)
	}
	if fp, err = orchestrator.NewFingerprint(op, nil, body); err != nil {
		return "", fp, bodyError(err)
	}
	return key, fp, nil
}

// validate checks the request before the key is claimed (a refusal after
// the claim would leave the key's row behind): the type, the card
// (vault.ValidateCard), billing details and metadata. Errors:
// validation_failed naming the field, never quoting a value.
func (req *createPaymentMethodRequest) validate(now time.Time) error {
	switch req.Type {
	case "card":
	case "":
		return orchestrator.ParamError("type", `type is required: "card"`)
	default:
		return orchestrator.ParamError("type", `type must be "card"`)
	}
	if req.Card == nil {
		return orchestrator.ParamError("card", "card is required: {number, exp_month, exp_year, cvc?, holder_name?}")
	}
	if err := vault.ValidateCard(*req.Card, now); err != nil {
		return err
	}
	if err := vault.ValidateBilling(req.BillingDetails); err != nil {
		return err
	}
	return orchestrator.ValidateMetadata(req.Metadata)
}

// vaultKey is the vault's key of a create under Idempotency-Key key: the
// key itself for a secret key, in a namespace of its own for publishable
// keys (the vault derives the method's id from it).
func vaultKey(p orchestrator.Principal, key string) string {
	if p.Role == orchestrator.RolePublishable {
		return "publishable:" + key
	}
	return key
}

// createPaymentMethod: POST /v1/payment_methods (merchant; publishable,
// through browserGate): 201 with the method and, for a merchant, its
// Location. A repeat under the same key gets the same answer, byte for
// byte; concurrent duplicates make one method (the key's lease, then the
// vault's id derived from the key). Errors: validation_failed naming the
// field, the keyed POST's, service_unavailable (no vault).
func (s *Server) createPaymentMethod(c echo.Context) error {
	p := principal(c)
	op := opCreatePaymentMethod
	if p.Role == orchestrator.RolePublishable {
		op = opCreatePaymentMethodPublishable
	}
	var req createPaymentMethodRequest
	key, fp, err := s.cardRequest(c, op, &req)
	if err != nil {
		return err
	}
	if err := req.validate(s.now()); err != nil {
		return err
	}
	in := vault.CreateInput{TenantID: p.TenantID, Key: vaultKey(p, key), RequestHash: fp.Hash, Card: *req.Card,
		BillingDetails: req.BillingDetails, Metadata: req.Metadata}
	var location func(any) string
	if p.Role == orchestrator.RolePublishable {
		in.PublishableKeyID = p.KeyID
	} else {
		location = func(v any) string { return paymentMethodLocation(v.(vault.PaymentMethod).ID) }
	}
	return s.keyedJSON(c, op, key, fp, http.StatusCreated, location, func(ctx context.Context) (any, error) {
		pm, err := s.vault.Create(ctx, in)
		if err != nil {
			return nil, err
		}
		if p.Role == orchestrator.RolePublishable {
			return publishableView(pm), nil
		}
		return pm, nil
	})
}

// validPaymentMethodID is a cheap shape check before any query: vpm_ and
// 32 hex digits.
func validPaymentMethodID(id string) bool {
	if len(id) != len(orchestrator.VaultPrefix)+32 || id[:len(orchestrator.VaultPrefix)] != orchestrator.VaultPrefix {
		return false
	}
	for _, r := range id[len(orchestrator.VaultPrefix):] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// paymentMethodID is the {id} of a payment method route. Errors:
// not_found.
func paymentMethodID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !validPaymentMethodID(id) {
		// Not quoted: whatever a client put in the path (a card number
		// by mistake) is not echoed.
		return "", orchestrator.Errorf(orchestrator.CodeNotFound, "no such payment method: ids are vpm_ and 32 hex digits")
	}
	return id, nil
}

// methodTenant is the tenant whose payment methods the caller reads: a
// merchant's own; support names one with tenant_id (the vault keeps
// methods per tenant). Errors: validation_failed.
func methodTenant(c echo.Context) (int64, error) {
	sc, err := readScope(c)
	if err != nil {
		return 0, err
	}
	if sc.TenantID == 0 {
		return 0, orchestrator.ParamError("tenant_id", "tenant_id is required: support reads payment methods one tenant at a time")
	}
	return sc.TenantID, nil
}

// getPaymentMethod: GET /v1/payment_methods/{id} (merchant: own; support:
// with tenant_id). A deleted method shows with deleted_at. Errors:
// not_found, validation_failed.
func (s *Server) getPaymentMethod(c echo.Context) error {
	id, err := paymentMethodID(c)
	if err != nil {
		return err
	}
	tenant, err := methodTenant(c)
	if err != nil {
		return err
	}
	pm, err := s.vault.Get(c.Request().Context(), tenant, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pm)
}

// listPaymentMethods: GET /v1/payment_methods?fingerprint=&created_gte=&created_lt=&limit=&starting_after=
// (merchant: own; support: with tenant_id), newest first, deleted ones
// too, cursor-paginated like payments. Errors: validation_failed.
func (s *Server) listPaymentMethods(c echo.Context) error {
	tenant, err := methodTenant(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	var f vault.ListFilter
	if v := q.Get("fingerprint"); v != "" {
		if len(v) > 64 || !base64URL(v) {
			return orchestrator.ParamError("fingerprint", "fingerprint must be a card fingerprint as payment methods show it")
		}
		f.Fingerprint = v
	}
	for name, dst := range map[string]**time.Time{"created_gte": &f.CreatedGTE, "created_lt": &f.CreatedLT} {
		if v := q.Get(name); v != "" {
			t, err := parseTimeParam(v)
			if err != nil {
				return orchestrator.ParamError(name, "%s must be an RFC 3339 time or Unix seconds, from %s to %s",
					name, minTimeParam.Format(time.RFC3339), maxTimeParam.Format(time.RFC3339))
			}
			*dst = &t
		}
	}
	if f.Limit, err = intParam(q.Get("limit"), "limit", 1, 100); err != nil {
		return err
	}
	if v := q.Get("starting_after"); v != "" {
		if !validPaymentMethodID(v) {
			return orchestrator.ParamError("starting_after", "starting_after must be a payment method id")
		}
		f.StartingAfter = v
	}
	pms, more, err := s.vault.List(c.Request().Context(), tenant, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newList(pms, more))
}

// base64URL reports whether s holds only base64url characters.
func base64URL(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// deletePaymentMethod: DELETE /v1/payment_methods/{id} (merchant): the
// card's data key is destroyed, so it can never be decrypted or charged
// again; 200 with the method and its deleted_at. Deleting again answers
// the same (idempotent by itself: not keyed). Errors: not_found.
func (s *Server) deletePaymentMethod(c echo.Context) error {
	if q := c.QueryParams(); len(q) > 0 {
		names := slices.Sorted(maps.Keys(q))
		return orchestrator.ParamError(names[0], "DELETE takes no query parameters")
	}
	id, err := paymentMethodID(c)
	if err != nil {
		return err
	}
	pm, err := s.vault.Delete(c.Request().Context(), principal(c).TenantID, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, pm)
}
