package providers

import "strings"

// Redacted replaces what ScrubCard takes out of a text.
const Redacted = "[redacted]"

// Card numbers are 13 to 19 digits long (ISO/IEC 7812).
const (
	minCardDigits = 13
	maxCardDigits = 19
)

// ScrubCard returns msg without the card c in it: c's number and CVC, and
// any run of 13 to 19 digits that passes the Luhn check, possibly split by
// single spaces or dashes ("4242 4242 4242 4242"), are replaced by
// Redacted; so is a run of more than 19 digits with such a number inside.
// The CVC is replaced where it stands alone (not inside a longer run of
// digits). c may be nil: only the Luhn runs are replaced then.
//
// A provider's answer may quote the request it refuses ("Your card number
// is incorrect: 4242…"); adapters pass every message of a card
// authorization through here before it reaches a log, a span or the
// payment's history. Scrubbing more than the card (an id that happens to
// pass the Luhn check) is the price of never scrubbing less.
func ScrubCard(msg string, c *Card) string {
	if c != nil && c.Number != "" {
		msg = strings.ReplaceAll(msg, c.Number, Redacted)
	}
	var cvc string
	if c != nil {
		cvc = c.CVC
	}
	var b strings.Builder
	changed := false
	for i := 0; i < len(msg); {
		if !isDigit(msg[i]) {
			b.WriteByte(msg[i])
			i++
			continue
		}
		j := runEnd(msg, i)
		run := msg[i:j]
		out := scrubRun(run, cvc)
		changed = changed || out != run
		b.WriteString(out)
		i = j
	}
	if !changed {
		return msg
	}
	return b.String()
}

// ScrubError returns err with the card c scrubbed (ScrubCard) from its
// text. An *Error is copied with its Message and Code scrubbed, and so
// is every *Error it wraps; a cause whose text still quotes the card is
// wrapped so that its Error() is scrubbed (errors.Is and errors.As still
// reach it).
// Adapters scrub the fields of their own error types first, so that a
// cause read with errors.As is clean too; nil stays nil.
func ScrubError(err error, c *Card) error {
	if err == nil {
		return nil
	}
	if pe, ok := err.(*Error); ok {
		cp := *pe
		cp.Message = ScrubCard(pe.Message, c)
		// The code is the provider's text too, and payorch keeps it (the
		// payment's failure_code, its events, the decline's answer).
		cp.Code = ScrubCard(pe.Code, c)
		if pe.Err != nil {
			cp.Err = ScrubError(pe.Err, c)
		}
		return &cp
	}
	if text := err.Error(); ScrubCard(text, c) != text {
		return &scrubbedError{err: err, text: ScrubCard(text, c)}
	}
	return err
}

// scrubbedError is an error whose text had the card scrubbed.
type scrubbedError struct {
	err  error
	text string
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.err }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// runEnd returns the end of the run of digits starting at i, single spaces
// or dashes between two digits included.
func runEnd(s string, i int) int {
	for i < len(s) {
		switch {
		case isDigit(s[i]):
			i++
		case (s[i] == ' ' || s[i] == '-') && i+1 < len(s) && isDigit(s[i+1]):
			i += 2
		default:
			return i
		}
	}
	return i
}

// scrubRun replaces, in a run of digit groups (split by single spaces or
// dashes), every sequence of whole groups of 13 to 19 digits in all that
// passes the Luhn check, every group longer than 19 digits with such a
// window inside (a number glued to other digits), and every group equal to
// cvc.
func scrubRun(run, cvc string) string {
	type group struct{ start, end int }
	var groups []group
	for i := 0; i < len(run); {
		j := i
		for j < len(run) && isDigit(run[j]) {
			j++
		}
		groups = append(groups, group{i, j})
		i = j + 1
	}
	mask := make([]bool, len(run))
	mark := func(from, to int) {
		for k := from; k < to; k++ {
			mask[k] = true
		}
	}
	hit := false
	for i, g := range groups {
		if n := g.end - g.start; n > maxCardDigits && hasLuhnWindow([]byte(run[g.start:g.end])) ||
			cvc != "" && run[g.start:g.end] == cvc {
			mark(g.start, g.end)
			hit = true
		}
		var digits []byte
		for _, h := range groups[i:] {
			digits = append(digits, run[h.start:h.end]...)
			if len(digits) > maxCardDigits {
				break
			}
			if len(digits) >= minCardDigits && luhn(digits) {
				mark(g.start, h.end)
				hit = true
			}
		}
	}
	if !hit {
		return run
	}
	var b strings.Builder
	for i := 0; i < len(run); {
		if !mask[i] {
			b.WriteByte(run[i])
			i++
			continue
		}
		for i < len(run) && mask[i] {
			i++
		}
		b.WriteString(Redacted)
	}
	return b.String()
}

// hasLuhnWindow reports whether some 13 to 19 consecutive digits of a
// longer run pass the Luhn check.
func hasLuhnWindow(digits []byte) bool {
	for start := 0; start+minCardDigits <= len(digits); start++ {
		for n := minCardDigits; n <= maxCardDigits && start+n <= len(digits); n++ {
			if luhn(digits[start : start+n]) {
				return true
			}
		}
	}
	return false
}

// LuhnValid reports whether number is all digits (at least two) and
// passes the Luhn check, as every card number does.
func LuhnValid(number string) bool {
	if len(number) < 2 {
		return false
	}
	for i := 0; i < len(number); i++ {
		if !isDigit(number[i]) {
			return false
		}
	}
	return luhn([]byte(number))
}

// luhn reports whether the digits pass the Luhn check.
func luhn(digits []byte) bool {
	sum := 0
	double := false
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i] - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}
