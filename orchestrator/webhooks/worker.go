package webhooks

// Delivering webhooks: the worker every `serve` runs.
//
// Deliveries are written with their event, in the transaction of the
// change (migration 00009), so a committed change is a delivery to make,
// even if the instance dies right after the commit: any instance's worker
// sends it.
//
// No transaction is open while an endpoint is called. A pass keeps up to
// its senders busy: a short transaction claims due deliveries, no more
// than it has senders free (so every claimed delivery is sent at once),
// and leases them (migration 00019): leased_until and next_attempt_at
// become now + the attempt's timeout + webhookLeaseMargin, and it
// commits. Each send then runs under that timeout, and its attempt is
// recorded as soon as it ends, by a short transaction (with the other
// attempts that ended meanwhile, and the next claim) whose update
// applies only if the delivery is still pending with the attempt count
// and the lease it was claimed with. Why that is enough:
//   - a lease is taken by one claim at a time: claims are serialised
//     across instances (webhookClaimLock, a transaction advisory lock held
//     for a claim's few milliseconds) and take only deliveries due, which
//     a lease is not until it ends;
//   - an instance that dies loses at most its attempts in flight (and
//     those ended but not yet recorded): their deliveries are due again
//     when their leases end, at most WebhookTimeout + webhookLeaseMargin
//     later, and are sent again. At least once, as SPEC says; the event
//     id is the receiver's dedupe key;
//   - a record that comes late (after its lease ended and another claim
//     took the delivery, or after a redelivery or the endpoint's disabling
//     changed it) matches nothing and is dropped: no attempt is counted
//     twice, and the attempt numbers stay 1, 2, 3 …
//
// Fairness. An endpoint has at most a webhookEndpointShare-th of the
// senders (at least 1) in flight at once, counted across instances by
// the leases in force, so a slow endpoint (one that accepts connections
// and never answers, say) holds at most its share of the senders while
// every other endpoint's deliveries go on. An endpoint that answered this
// instance's last attempt within webhookFastAnswer is fast: it may have
// every sender free, as it gives them back within that time (a backlog
// of a healthy endpoint drains at the speed it did before leases). If a
// fast endpoint turns slow with many sends in flight, the others wait for
// one timeout at most: its first attempt without a quick answer makes it
// slow again. A claim takes each endpoint's oldest due deliveries up to
// its room, and orders them round-robin: first each tenant's first, then
// each tenant's second …, a tenant's own endpoints taking turns.
//
// Each endpoint has a breaker too: webhookBreakerTrips attempts in a row
// without an answer (timed out, or no connection) open it. Its
// deliveries then wait (webhookBreakerPause, doubling at each open, up
// to webhookBreakerMaxPause); when the pause is over, one delivery goes
// as a probe. Any answer, even an error status, closes it; no answer
// opens it again for longer. Only that endpoint waits.
//
// Retries: after the n-th failed attempt the next is due in
// webhookBackoff(n): 30 s, then tripling up to 10 h, each with ±10%
// jitter (30 s, 1.5 min, 4.5 min, 13.5 min, 40.5 min, 2 h, 6 h, 10 h,
// 10 h …). A delivery still failing 3 days after it was first due is given
// up (failed); an endpoint whose every delivery has failed for 3 days is
// disabled, and a webhook_endpoint.disabled event says so.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payorch/payorch/orchestrator"
	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// Delivery limits.
const (
	// WebhookTimeout bounds one delivery attempt, connection included:
	// the default of Config.WebhookTimeout and its upper bound.
	WebhookTimeout = 10 * time.Second
	// WebhookGiveUpAfter is how long deliveries are retried, and how long
	// an endpoint may fail before it is disabled.
	WebhookGiveUpAfter = 72 * time.Hour
	// DefaultWebhookSenders is how many deliveries a pass sends at once
	// unless Config.WebhookSenders says otherwise.
	DefaultWebhookSenders = 32
	// maxResponseExcerpt is how much of an answer an attempt keeps.
	maxResponseExcerpt = 1024
	// webhookLeaseMargin is how much longer than its attempt's timeout a
	// delivery is leased: time to start the send and record it.
	webhookLeaseMargin = 5 * time.Second
	// webhookPassFor is how long a pass claims deliveries; it then waits
	// for those in flight (one timeout at most) and ends.
	webhookPassFor = 10 * time.Second
	// webhookClaimEvery is how often a pass with senders free looks for
	// due deliveries while others are in flight (it looks at once when
	// one ends).
	webhookClaimEvery = 200 * time.Millisecond
	// webhookGatherFor is how long a pass waits, once an attempt has
	// ended, for others to end, to record them in one transaction.
	webhookGatherFor = 10 * time.Millisecond
	// webhookEndpointShare: an endpoint not known to be fast has at most
	// 1/webhookEndpointShare of the senders in flight (at least 1).
	webhookEndpointShare = 4
	// webhookFastAnswer: an endpoint whose last attempt from this instance
	// was answered within it is fast, and may have every free sender.
	webhookFastAnswer = time.Second
	// webhookFastMax bounds how many fast endpoints an instance keeps.
	webhookFastMax = 1000
)

// webhookBackoff is the delay after the n-th failed attempt (n ≥ 1),
// before jitter: 30 s, tripling, at most 10 h.
func webhookBackoff(n int) time.Duration {
	d := 30 * time.Second
	for i := 1; i < n && d < 10*time.Hour; i++ {
		d *= 3
	}
	return min(d, 10*time.Hour)
}

// jitter spreads d by ±10%, so retries of many deliveries do not arrive
// together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

// dueDelivery is a delivery claimed (claimDeliveriesSQL), with what
// sending it needs.
type dueDelivery struct {
	EventID    string `db:"event_id"`
	EndpointID string `db:"endpoint_id"`
	// Attempts is its count of attempts when claimed; LeasedUntil is the
	// end of the lease it is sent under. Its record applies only while
	// both are still the delivery's.
	Attempts            int             `db:"attempts"`
	LeasedUntil         time.Time       `db:"leased_until"`
	FirstDue            time.Time       `db:"first_due"`
	TenantID            *int64          `db:"tenant_id"` // nil: a staff event
	Type                string          `db:"type"`
	PaymentID           *string         `db:"payment_id"`
	Sequence            *int            `db:"sequence"`
	Object              json.RawMessage `db:"object"`
	CreatedAt           time.Time       `db:"created_at"`
	URL                 string          `db:"url"`
	Secret              string          `db:"secret"`
	PreviousSecret      *string         `db:"previous_secret"`
	PreviousSecretUntil *time.Time      `db:"previous_secret_until"`
	// Healthy: the endpoint answered 2xx to its last attempt recorded.
	Healthy bool `db:"healthy"`
}

// deliveryResult is what one attempt got.
type deliveryResult struct {
	at         time.Time
	latency    time.Duration
	statusCode int    // 0: no answer
	err        string // why there was no answer
	excerpt    string
}

func (r deliveryResult) ok() bool { return r.statusCode >= 200 && r.statusCode < 300 }

// answered says the endpoint answered, whatever the status: for its
// breaker, it is up.
func (r deliveryResult) answered() bool { return r.statusCode != 0 }

// sentDelivery is an attempt made, to record.
type sentDelivery struct {
	d dueDelivery
	r deliveryResult
}

// DeliveryStats counts one pass of the delivery worker. Sent counts the
// attempts made; Delivered, Failed and GivenUp those recorded (an
// attempt whose record came after its lease was taken over is not).
type DeliveryStats struct {
	Sent, Delivered, Failed, GivenUp int
	// BreakerOpens counts the endpoint breakers this pass opened.
	BreakerOpens int
}

// DeliverWebhooks runs one pass of the delivery worker: for up to
// webhookPassFor, it claims due deliveries as senders are free, sends
// them, and records each attempt as it ends; then it waits for the
// attempts in flight (see the top of this file). Safe on several
// instances at once.
func (s *Service) DeliverWebhooks(ctx context.Context) (DeliveryStats, error) {
	p := &deliveryPass{s: s, results: make(chan sentDelivery, s.senders)}
	err := p.run(ctx)
	if err == nil {
		// Every pass, even one with nothing due: an endpoint failing for
		// 3 days is disabled whether or not a retry of it is due now.
		_, err = s.pool.Exec(ctx, disableFailingSQL, orchestrator.NamedArgs{"now": s.now(), "give_up_after": WebhookGiveUpAfter})
	}
	if err != nil {
		return p.st, orchestrator.Internalf("deliver webhooks: %w", err)
	}
	return p.st, nil
}

// deliveryPass is one run of DeliverWebhooks.
type deliveryPass struct {
	s *Service
	// results receives every send's attempt; room for one per sender, so
	// a sender never waits for the pass.
	results  chan sentDelivery
	inFlight int
	st       DeliveryStats
}

// run claims, sends and records until nothing is due and nothing is in
// flight, or, after webhookPassFor, until what is in flight is recorded.
// On an error (or ctx's end) the sends in flight are cut short and not
// recorded: their leases end and they are sent again.
func (p *deliveryPass) run(ctx context.Context) error {
	sendCtx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for ; p.inFlight > 0; p.inFlight-- {
			<-p.results
		}
	}()
	claimUntil := time.Now().Add(webhookPassFor)
	tick := time.NewTicker(webhookClaimEvery)
	defer tick.Stop()
	var ended []sentDelivery
	for {
		free := 0
		if time.Now().Before(claimUntil) {
			free = p.s.senders - p.inFlight
		}
		if len(ended) > 0 || free > 0 {
			claimed, err := p.step(ctx, ended, free)
			if err != nil {
				return err
			}
			ended = ended[:0]
			for _, d := range claimed {
				p.inFlight++
				go func() { p.results <- sentDelivery{d: d, r: p.s.send(sendCtx, d)} }()
			}
		}
		if p.inFlight == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case r := <-p.results:
			p.inFlight--
			ended = p.gather(ctx, append(ended, r))
		}
	}
}

// gather adds to ended the attempts that end within webhookGatherFor,
// stopping early once none is in flight, so that one transaction records
// them together (and claims as many).
func (p *deliveryPass) gather(ctx context.Context, ended []sentDelivery) []sentDelivery {
	t := time.NewTimer(webhookGatherFor)
	defer t.Stop()
	for p.inFlight > 0 {
		select {
		case <-ctx.Done():
			return ended
		case <-t.C:
			return ended
		case r := <-p.results:
			p.inFlight--
			ended = append(ended, r)
		}
	}
	return ended
}

// step records the attempts ended and claims up to free due deliveries,
// in one short transaction (one round trip: a batch is one implicit
// transaction), and counts what it recorded once committed.
func (p *deliveryPass) step(ctx context.Context, ended []sentDelivery, free int) ([]dueDelivery, error) {
	for _, x := range ended {
		p.s.fast.note(x.d.EndpointID, x.r)
	}
	b := &pgx.Batch{}
	queued := queueRecords(b, ended)
	if free > 0 {
		p.s.queueClaim(b, free)
	}
	br := p.s.pool.SendBatch(ctx, b)
	rec, err := readRecords(br, queued)
	var claimed []dueDelivery
	if err == nil && free > 0 {
		claimed, err = readClaim(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	p.st.Sent += len(ended)
	p.st.Delivered += rec.outcomes["delivered"]
	p.st.Failed += rec.outcomes["failed"]
	p.st.GivenUp += rec.outcomes["gave_up"]
	p.st.BreakerOpens += rec.opens
	for outcome, n := range rec.outcomes {
		p.s.tel.delivered(outcome, n)
	}
	p.s.tel.breakerOpened(rec.opens)
	return claimed, nil
}

// webhookBody is the JSON sent: the event as GET /v1/events/{id} answers
// (rendered the same way: orchestrator.WebhookEvent.Render).
func webhookBody(d dueDelivery) ([]byte, error) {
	ev := orchestrator.WebhookEvent{ID: d.EventID, TenantID: d.TenantID, Type: d.Type, PaymentID: d.PaymentID,
		Sequence: d.Sequence, Data: d.Object, CreatedAt: d.CreatedAt}
	if err := ev.Render(); err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}

// send makes one attempt of d, within s.timeout: POST the event,
// signed with the endpoint's secrets (the previous one too while it is
// valid).
func (s *Service) send(ctx context.Context, d dueDelivery) deliveryResult {
	r := deliveryResult{at: s.now()}
	body, err := webhookBody(d)
	if err != nil {
		r.err = "encode event: " + err.Error()
		return r
	}
	secrets := []string{d.Secret}
	if d.PreviousSecret != nil && d.PreviousSecretUntil != nil && r.at.Before(*d.PreviousSecretUntil) {
		secrets = append(secrets, *d.PreviousSecret)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		r.err = "bad endpoint URL"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "payorch-webhooks/1")
	req.Header.Set(webhooksig.Header, webhooksig.Sign(secrets, time.Now(), body))
	req.Header.Set(webhooksig.EventIDHeader, d.EventID)
	start := time.Now()
	res, err := s.client.Do(req)
	r.latency = time.Since(start)
	if err != nil {
		r.err = deliveryError(err)
		if errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil {
			r.err = fmt.Sprintf("no answer within %s", s.timeout)
		}
		return r
	}
	defer res.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(res.Body, maxResponseExcerpt))
	r.statusCode, r.excerpt = res.StatusCode, toValidText(excerpt)
	return r
}

// toValidText keeps what is valid UTF-8 text of an answer, without NUL
// (PostgreSQL text holds none).
func toValidText(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
}
