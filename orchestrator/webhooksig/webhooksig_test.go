package webhooksig_test

import (
	"encoding/base64"
	"errors"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payorch/payorch/orchestrator/webhooksig"
)

// The test vector: fixed secrets, time and body, with the signatures
// computed outside Go, once, by
//
//	printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac 'whsec_test'
//	printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac 'whsec_old'
//
// so that the scheme cannot drift without a test saying so.
const (
	vectorSecret    = "whsec_test"
	vectorOldSecret = "whsec_old"
	vectorUnix      = 1700000000
	vectorBody      = `{"a":1}`
	vectorSig       = "38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
	vectorOldSig    = "b9d801502bb535e960ee9aeee7a294b082bda5089d79c7db610b85116ce6faa6"
)

// vectorTime is the vector's signing time.
var vectorTime = time.Unix(vectorUnix, 0)

// zeroSig is a well-formed v1 value that signs nothing.
var zeroSig = strings.Repeat("0", 64)

func TestSignMatchesTheVector(t *testing.T) {
	t.Parallel()
	t.Run("OneSecret", func(t *testing.T) {
		t.Parallel()
		got := webhooksig.Sign([]string{vectorSecret}, vectorTime, []byte(vectorBody))
		if want := "t=1700000000,v1=" + vectorSig; got != want {
			t.Fatalf("Sign = %q, want %q", got, want)
		}
	})
	t.Run("RotationSignsNewThenOld", func(t *testing.T) {
		t.Parallel()
		got := webhooksig.Sign([]string{vectorSecret, vectorOldSecret}, vectorTime, []byte(vectorBody))
		if want := "t=1700000000,v1=" + vectorSig + ",v1=" + vectorOldSig; got != want {
			t.Fatalf("Sign = %q, want %q", got, want)
		}
	})
	t.Run("SubSecondsAreDropped", func(t *testing.T) {
		t.Parallel()
		got := webhooksig.Sign([]string{vectorSecret}, vectorTime.Add(999*time.Millisecond), []byte(vectorBody))
		if want := "t=1700000000,v1=" + vectorSig; got != want {
			t.Fatalf("Sign = %q, want %q", got, want)
		}
	})
}

func TestVerifyAccepts(t *testing.T) {
	t.Parallel()
	body := []byte(vectorBody)
	good := "t=1700000000,v1=" + vectorSig
	tests := []struct {
		name      string
		header    string
		secret    string
		tolerance time.Duration
		now       time.Time
	}{
		{name: "TheVector", header: good, secret: vectorSecret, now: vectorTime},
		{name: "RotationNewSecret", header: good + ",v1=" + vectorOldSig, secret: vectorSecret, now: vectorTime},
		{name: "RotationOldSecret", header: good + ",v1=" + vectorOldSig, secret: vectorOldSecret, now: vectorTime},
		{name: "MatchAfterAWrongOne", header: "t=1700000000,v1=" + zeroSig + ",v1=" + vectorSig, secret: vectorSecret, now: vectorTime},
		{name: "V0Ignored", header: "t=1700000000,v0=not-even-hex,v1=" + vectorSig, secret: vectorSecret, now: vectorTime},
		{name: "UnknownSchemeIgnored", header: "v9=xyz,t=1700000000,v1=" + vectorSig, secret: vectorSecret, now: vectorTime},
		{name: "ItemsInAnyOrder", header: "v1=" + vectorSig + ",t=1700000000", secret: vectorSecret, now: vectorTime},
		{name: "SpacesAroundItems", header: " t=1700000000 , v1=" + vectorSig + " ", secret: vectorSecret, now: vectorTime},
		{name: "UppercaseHex", header: "t=1700000000,v1=" + strings.ToUpper(vectorSig), secret: vectorSecret, now: vectorTime},
		{name: "EightSignatures", header: "t=1700000000" + strings.Repeat(",v1="+zeroSig, 7) + ",v1=" + vectorSig, secret: vectorSecret, now: vectorTime},
		{name: "OldAtTheTolerance", header: good, secret: vectorSecret, now: vectorTime.Add(webhooksig.DefaultTolerance)},
		{name: "EarlyAtTheTolerance", header: good, secret: vectorSecret, now: vectorTime.Add(-webhooksig.DefaultTolerance)},
		{name: "GivenTolerance", header: good, secret: vectorSecret, tolerance: time.Hour, now: vectorTime.Add(59 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tolerance := tt.tolerance
			if tolerance == 0 {
				tolerance = webhooksig.DefaultTolerance
			}
			if err := webhooksig.Verify(tt.header, body, tt.secret, tolerance, tt.now); err != nil {
				t.Fatalf("Verify(%q) = %v, want nil", tt.header, err)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	body := []byte(vectorBody)
	good := "t=1700000000,v1=" + vectorSig
	tol := webhooksig.DefaultTolerance
	tests := []struct {
		name      string
		header    string
		body      []byte
		secret    string
		tolerance time.Duration
		now       time.Time
		want      error
	}{
		// The signature.
		{name: "TamperedBody", header: good, body: []byte(`{"a":2}`), secret: vectorSecret, now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "BodyWithTrailingNewline", header: good, body: []byte(vectorBody + "\n"), secret: vectorSecret, now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "WrongSecret", header: good, secret: "whsec_other", now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "SecretWithoutItsPrefix", header: good, secret: "test", now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "EmptySecret", header: good, secret: "", now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "EmptySecretSignedWithTheEmptyKey", header: webhooksig.Sign([]string{""}, vectorTime, body), secret: "", now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "TimestampChanged", header: "t=1700000001,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "OnlyV0Matches", header: "t=1700000000,v0=" + vectorSig + ",v1=" + zeroSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrNoValidSignature},
		{name: "RotationNeitherSecret", header: good + ",v1=" + vectorOldSig, secret: "whsec_third", now: vectorTime, want: webhooksig.ErrNoValidSignature},
		// The timestamp.
		{name: "Stale", header: good, secret: vectorSecret, now: vectorTime.Add(tol + time.Second), want: webhooksig.ErrTimestampOutOfTolerance},
		{name: "Future", header: good, secret: vectorSecret, now: vectorTime.Add(-tol - time.Second), want: webhooksig.ErrTimestampOutOfTolerance},
		{name: "StaleForAGivenTolerance", header: good, secret: vectorSecret, tolerance: time.Second, now: vectorTime.Add(2 * time.Second), want: webhooksig.ErrTimestampOutOfTolerance},
		{name: "ZeroToleranceIsTheDefault", header: good, secret: vectorSecret, tolerance: -1, now: vectorTime.Add(tol + time.Second), want: webhooksig.ErrTimestampOutOfTolerance},
		{name: "StaleAndForgedIsAForgery", header: "t=1700000000,v1=" + zeroSig, secret: vectorSecret, now: vectorTime.Add(time.Hour), want: webhooksig.ErrNoValidSignature},
		// The header.
		{name: "Missing", header: "", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMissingHeader},
		{name: "Blank", header: "  ", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMissingHeader},
		{name: "Garbage", header: "garbage", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "NoT", header: "v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "NoV1", header: "t=1700000000", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "OnlyV0", header: "t=1700000000,v0=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TTwice", header: "t=1700000000,t=1700000000,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TwoHeadersJoined", header: good + ", " + good, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "EmptyT", header: "t=,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TNotANumber", header: "t=abc,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TSigned", header: "t=+1700000000,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TNegative", header: "t=-1,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TFractional", header: "t=1700000000.5,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "THuge", header: "t=" + strings.Repeat("9", 19) + ",v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "SpaceAroundEquals", header: "t = 1700000000,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "V1NotHex", header: "t=1700000000,v1=" + strings.Repeat("z", 64), secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "V1Short", header: "t=1700000000,v1=" + vectorSig[:62], secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "V1Long", header: "t=1700000000,v1=" + vectorSig + "00", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "V1Empty", header: "t=1700000000,v1=", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "EmptyItem", header: "t=1700000000,,v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "TrailingComma", header: good + ",", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "ItemWithoutEquals", header: good + ",v0", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "EmptyKey", header: good + ",=x", secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "NineSignatures", header: "t=1700000000" + strings.Repeat(",v1="+zeroSig, 8) + ",v1=" + vectorSig, secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
		{name: "Oversize", header: good + strings.Repeat(",v0=x", 4<<10/5), secret: vectorSecret, now: vectorTime, want: webhooksig.ErrMalformedHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.body
			if b == nil {
				b = body
			}
			tolerance := tt.tolerance
			if tolerance == 0 {
				tolerance = tol
			}
			err := webhooksig.Verify(tt.header, b, tt.secret, tolerance, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify(%.80q) = %v, want %v", tt.header, err, tt.want)
			}
			for _, other := range []error{webhooksig.ErrMissingHeader, webhooksig.ErrMalformedHeader, webhooksig.ErrTimestampOutOfTolerance, webhooksig.ErrNoValidSignature} {
				if other != tt.want && errors.Is(err, other) {
					t.Fatalf("Verify(%.80q) = %v, which is also %v", tt.header, err, other)
				}
			}
			if err != nil && (strings.Contains(err.Error(), vectorSig) || strings.Contains(err.Error(), vectorSecret)) {
				t.Fatalf("the error %q gives away the secret or the expected signature", err)
			}
		})
	}
}

// TestOversizeHeaderBoundary shows the limit is 4 KiB: a header of exactly
// that length is read, one byte more is refused.
func TestOversizeHeaderBoundary(t *testing.T) {
	t.Parallel()
	good := "t=1700000000,v1=" + vectorSig
	pad := func(n int) string { return good + ",v0=" + strings.Repeat("x", n-len(good)-len(",v0=")) }
	if err := webhooksig.Verify(pad(4<<10), []byte(vectorBody), vectorSecret, 0, vectorTime); err != nil {
		t.Fatalf("a 4096-byte header: %v, want nil", err)
	}
	if err := webhooksig.Verify(pad(4<<10+1), []byte(vectorBody), vectorSecret, 0, vectorTime); !errors.Is(err, webhooksig.ErrMalformedHeader) {
		t.Fatalf("a 4097-byte header: %v, want ErrMalformedHeader", err)
	}
}

func TestSignThenVerify(t *testing.T) {
	t.Parallel()
	newer, err := webhooksig.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	older, err := webhooksig.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"id":"evt_1","type":"payment.captured","data":{"amount":1999}}`)
	header := webhooksig.Sign([]string{newer, older}, now, body)
	if n := strings.Count(header, ",v1="); n != 2 {
		t.Fatalf("Sign with two secrets gave %d v1 signatures: %q", n, header)
	}
	for _, secret := range []string{newer, older} {
		if err := webhooksig.Verify(header, body, secret, webhooksig.DefaultTolerance, now); err != nil {
			t.Errorf("Verify with one of the rotation's secrets: %v", err)
		}
	}
	if err := webhooksig.Verify(header, body, vectorSecret, webhooksig.DefaultTolerance, now); !errors.Is(err, webhooksig.ErrNoValidSignature) {
		t.Errorf("Verify with a third secret: %v, want ErrNoValidSignature", err)
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		s, err := webhooksig.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		rest, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("secret %q lacks the whsec_ prefix", s)
		}
		raw, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || len(raw) != 32 {
			t.Fatalf("secret %q is not 32 bytes of unpadded base64url (%d bytes, %v)", s, len(raw), err)
		}
		if seen[s] {
			t.Fatalf("secret %q made twice", s)
		}
		seen[s] = true
	}
}

// TestImportsOnlyTheStandardLibrary keeps the package vendorable alone:
// its production files import no other module and nothing from payorch.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s: only the standard library is allowed", name, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no production file found to check")
	}
}
