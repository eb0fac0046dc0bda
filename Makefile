# payorch — see README.md. `make run` and `make test` need only Go; PostgreSQL
# binaries are found on the machine (or installed on Debian when root).

GO      ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: run test test-short build vet bench fuzz clean

## run: the whole product on an embedded PostgreSQL, API on http://127.0.0.1:8080
run: build
	./bin/payorch dev

## test: the whole suite, against real PostgreSQL clusters the tests start themselves
test: vet
	$(GO) test -race -count=1 -timeout 20m ./...

## build: bin/payorch
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/payorch ./cmd/payorch

vet:
	$(GO) vet ./...

## bench: the benchmarks whose numbers go in BENCHMARKS.md
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

clean:
	rm -rf bin
