# ctdispatch: the commands the README and CI use.

STATICCHECK_VERSION := v0.8.2
GOBIN := $(shell go env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck

.PHONY: all build test test-short readme-test lint fmt tools bench fuzz demo clean

all: lint test

## build: compile the ctdispatch binary into bin/. Without cgo the binary is
## static: no dynamic loader or libc to map at start, which takes 3-5 ms off
## every short command (query, id) on a VM where each page fault is slow.
## (Tests keep cgo: the race detector needs it.)
build:
	CGO_ENABLED=0 go build -o bin/ctdispatch ./cmd/ctdispatch

## demo: the whole product on this machine: emulator, worker, outbox
demo:
	go run ./cmd/ctdispatch demo

## test: the whole test suite with the race detector (what CI runs). The
## race detector needs cgo and a C compiler; without them the suite runs
## without -race, and says so. TEST_PKGS narrows it (default ./...).
TEST_PKGS ?= ./...
test:
	@if [ "$$(go env CGO_ENABLED)" = 1 ] && command -v "$$(go env CC)" >/dev/null 2>&1; then \
		echo go test -race -count=1 $(TEST_PKGS); go test -race -count=1 $(TEST_PKGS); \
	else \
		echo "make test: no C compiler ($$(go env CC)) or cgo disabled: running without the race detector (-race needs cgo; install gcc)" >&2; \
		echo CGO_ENABLED=0 go test -count=1 $(TEST_PKGS); CGO_ENABLED=0 go test -count=1 $(TEST_PKGS); \
	fi

## readme-test: run the README's sh blocks in order (scripts/readme-test)
readme-test:
	scripts/readme-test

## lint: gofmt, go vet and staticcheck must all be clean
lint: tools
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(STATICCHECK) ./...

## tools: install the pinned linters
tools:
	@[ -x $(STATICCHECK) ] && $(STATICCHECK) -version | grep -q "$(STATICCHECK_VERSION:v%=%)" || \
		GOFLAGS= go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## fmt: rewrite files with gofmt
fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: CloudTaskID against its SHA-256 baseline (and against SHA-256 plus the
## one result allocation), 10 interleaved runs, compared by benchstat
BENCHSTAT := $(GOBIN)/benchstat
bench:
	@[ -x $(BENCHSTAT) ] || GOFLAGS= go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
	go test -c -o bin/naming.test ./naming/
	rm -f bench.txt; for i in 1 2 3 4 5 6 7 8 9 10; do \
		bin/naming.test -test.run '^$$' -test.bench 'CloudTaskID|SHA256Baseline|SHA256AllocBaseline' -test.benchmem >> bench.txt; done
	grep 'SHA256Baseline/' bench.txt | sed 's/SHA256Baseline/HashID/' > bench-baseline.txt
	grep 'SHA256AllocBaseline/' bench.txt | sed 's/SHA256AllocBaseline/HashID/' > bench-alloc.txt
	grep CloudTaskID bench.txt | sed 's/CloudTaskID/HashID/' > bench-cloudtaskid.txt
	$(BENCHSTAT) bench-baseline.txt bench-alloc.txt bench-cloudtaskid.txt

## fuzz: a short run of each fuzz target (FUZZTIME=60s to change it)
FUZZTIME ?= 30s
fuzz:
	go test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./naming/
	go test -run '^$$' -fuzz FuzzCloudTaskID -fuzztime $(FUZZTIME) ./naming/
	go test -run '^$$' -fuzz FuzzReadParquet -fuzztime $(FUZZTIME) ./outbox/
	go test -run '^$$' -fuzz FuzzDelivery -fuzztime $(FUZZTIME) ./cloudtasks/worker/

clean:
	rm -rf bin bench.txt bench-baseline.txt bench-alloc.txt bench-cloudtaskid.txt
