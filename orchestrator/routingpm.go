package orchestrator

import "regexp"

// paymentMethodRE is the shape of the payment methods a routing rule may
// match on: the shape every adapter accepts today (Stripe's pm_… ids; the
// fake copies it; see their CheckPaymentMethod). A payment's own method is
// checked by its connector's adapter, not by this.
var paymentMethodRE = regexp.MustCompile(`^pm_[A-Za-z0-9_]{1,100}$`)
