# payorch — see README.md. `make run` and `make test` need only Go; PostgreSQL
# binaries and Chromium are found on the machine (or installed from Debian's
# packages when root), stripe-mock is installed with `go install`, and
# govulncheck and its database come through the Go module proxy.

# Go 1.27.3, which go.mod's go line asks for. A machine starts on its own Go
# (1.26.8, with GOTOOLCHAIN=local in its go.env) and ignores go.mod's wish, so
# every recipe, and every go command the tests start, gets this export: the
# go command then fetches go1.27.3 from the module proxy once, like a module,
# and runs it. Override on the command line (make GOTOOLCHAIN=local vulncheck
# runs the machine's own Go).
export GOTOOLCHAIN := go1.27.3

GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

STRIPE_MOCK_VERSION := v0.203.0
# govulncheck, and the golang.org/x/vulndb snapshot whose reports are the
# vulnerability database; both are built once per version into the user
# cache dir (~/.cache/payorch-vulncheck). Bump VULNDB_VERSION to take newer
# reports: go list -m golang.org/x/vulndb@latest names the newest.
VULN_VERSION   := v1.9.0
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: run test tools apt-install build vet vulncheck bench clean

## run: the whole product on an embedded PostgreSQL, API on http://127.0.0.1:8080
run: build
	./bin/payorch dev

## test: the whole suite, against real PostgreSQL clusters the tests start themselves
test: vet vulncheck tools
	$(GO) test -race -count=1 -timeout 20m ./...

## build: bin/payorch
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/payorch ./cmd/payorch

vet:
	$(GO) vet ./...

## vulncheck: govulncheck at symbol level against a vulnerability database
## built offline from golang.org/x/vulndb (only the module proxy is reached);
## fails on a vulnerability payorch's code reaches that a newer version fixes,
## reports (without failing) reachable ones that have no fix yet
vulncheck:
	$(GO) run ./internal/tools/vulncheck -vulndb $(VULNDB_VERSION) \
		-scanner golang.org/x/vuln/cmd/govulncheck@$(VULN_VERSION) ./...

## tools: what the tests drive, installed once when missing: PostgreSQL
## server binaries, pgbouncer, pg_auto_failover (for the newest PostgreSQL
## installed) and Chromium (Debian's packages, as root), stripe-mock
## (go install; the Stripe adapter's request shapes are checked against it)
tools:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		$(MAKE) --no-print-directory apt-install PKG=postgresql
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || \
		$(MAKE) --no-print-directory apt-install PKG=pgbouncer
	@v=$$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1); \
		{ command -v pg_autoctl >/dev/null && test -e /usr/lib/postgresql/$$v/lib/pgautofailover.so; } || \
		$(MAKE) --no-print-directory apt-install PKG=postgresql-$$v-auto-failover
	@command -v chromium >/dev/null || $(MAKE) --no-print-directory apt-install PKG=chromium
	@test -x "$(GOBIN)/stripe-mock" || command -v stripe-mock >/dev/null || \
		$(GO) install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

apt-install:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(PKG); \
	else \
		echo "make: the tests need $(PKG); install it (Debian/Ubuntu: sudo apt-get install $(PKG))" >&2; exit 1; \
	fi

## bench: the benchmarks whose numbers go in BENCHMARKS.md (minutes, not
## seconds; -p 1 so that nothing else builds or runs while one is measured)
bench:
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -benchtime 10s -count=1 -timeout 30m ./...

clean:
	rm -rf bin
