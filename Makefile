# ctdispatch: the commands the README and CI use.

STATICCHECK_VERSION := v0.8.2
GOBIN := $(shell go env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck

.PHONY: all build build-iceberg image container-test test test-long test-river readme-test lint fmt tools bench bench-river fuzz demo clean

all: lint test test-long

## build: compile the ctdispatch binary into bin/. Without cgo the binary is
## static: no dynamic loader or libc to map at start, which takes 3-5 ms off
## every short command (query, id) on a VM where each page fault is slow.
## (Tests keep cgo: the race detector needs it.)
build:
	CGO_ENABLED=0 go build -o bin/ctdispatch ./cmd/ctdispatch

## build-iceberg: the same binary with Iceberg publication (compact
## --iceberg, stats' snapshots, query --as-of). Linking iceberg-go adds
## its start-up to every command, so the default build leaves it out
## (ADR 0017; the figures are in BENCHMARKS.md).
build-iceberg:
	CGO_ENABLED=0 go build -tags iceberg -o bin/ctdispatch ./cmd/ctdispatch

## image: the emulator's container image (Dockerfile) from the static
## binary and the build host's CA certificates (CA_CERTS, Debian's path by
## default), copied into bin/ because a build copies only from its context.
## podman builds OCI images by default, which drop HEALTHCHECK: --format
## docker keeps it. CONTAINER_TOOL=docker to use Docker.
IMAGE ?= ctdispatch-emulator:dev
CONTAINER_TOOL ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
image: build
	cp $(CA_CERTS) bin/ca-certificates.crt
	$(CONTAINER_TOOL) build $(if $(filter podman,$(notdir $(CONTAINER_TOOL))),--format docker) -t $(IMAGE) .

## container-test: build the image, run it, and drive it from the host
## with the official client and a worker that verifies its OIDC token; then
## install the binary from a local module proxy and check --version
## (scripts/container-test)
container-test:
	scripts/container-test

## demo: the whole product on this machine: emulator, worker, outbox
demo:
	go run ./cmd/ctdispatch demo

## test: the test suite with the race detector (CI runs it, then
## test-long). The race detector needs cgo and a C compiler; without them
## the suite runs without -race, and says so. TEST_PKGS narrows it (default
## ./..., less LONG_PKGS). The output goes through testsummary, which first
## fetches the modules the module cache lacks, a line per module; prints
## what go test prints, each package's result line after how many packages
## have ended ("[12/40] ok ..."), and every 30 s the packages still running;
## then the slowest packages and tests, every skipped test with its reason
## and a line of counts. Under CI=true a skip for want of a tool .ci/run
## installs fails the run. The go test -json stream is kept in TEST_JSON.
##
## test-long: the suites that take many minutes of both cores (LONG_PKGS:
## the chaos suite), apart so that make test stays within 15 minutes on 2
## cores (docs/development.md); CI runs both, so no test is dropped. A
## plain go test ./... still runs everything.
TEST_PKGS ?= ./...
# TEST_TAGS: make test builds with Iceberg publication, so its tests run
# (the binaries the CLI's tests build get the same tags); one test builds
# the default binary and checks what it refuses.
TEST_TAGS ?= iceberg
LONG_PKGS := ./internal/chaos/
TEST_JSON ?= bin/test.jsonl
TESTSUMMARY := go run ./internal/testtools/testsummary
# make test leaves LONG_PKGS out only when TEST_PKGS is the whole module.
TEST_EXCEPT := $(if $(filter-out ./...,$(TEST_PKGS)),,-except '$(LONG_PKGS)')

# go-test runs go test -json on the packages $(1) through testsummary with
# the flags $(2): with -race where cgo and a C compiler are there.
define go-test
	@if [ "$$(go env CGO_ENABLED)" = 1 ] && command -v "$$(go env CC)" >/dev/null 2>&1; then \
		echo go test -race -count=1 -tags "'$(TEST_TAGS)'" -json $(1) '| testsummary'; \
		$(TESTSUMMARY) -fetch $(2) go test -race -count=1 -tags '$(TEST_TAGS)' -json $(1); \
	else \
		echo "make $@: no C compiler ($$(go env CC)) or cgo disabled: running without the race detector (-race needs cgo; install gcc)" >&2; \
		echo CGO_ENABLED=0 go test -count=1 -tags "'$(TEST_TAGS)'" -json $(1) '| testsummary'; \
		CGO_ENABLED=0 $(TESTSUMMARY) -fetch $(2) go test -count=1 -tags '$(TEST_TAGS)' -json $(1); \
	fi
endef

test:
	$(call go-test,$(TEST_PKGS),$(TEST_EXCEPT) -save $(TEST_JSON))
ifeq ($(TEST_PKGS),./...)
	@$(MAKE) --no-print-directory test-river
endif

## test-river: bench/river's check that each line of make bench-river
## still runs (a few transactions each, about 15 s). It is a module of its
## own (river is a dependency of that module only), which ./... does not
## enter, so make test runs it here when it runs the whole module.
RIVER_DIR := bench/river
test-river:
	cd $(RIVER_DIR) && go test -count=1 -run '^TestLines$$' ./...

test-long:
	$(call go-test,$(LONG_PKGS),-save bin/test-long.jsonl)

## readme-test: run the sh blocks of README.md and docs/*.md in order (scripts/readme-test)
readme-test:
	scripts/readme-test

## lint: gofmt, go mod tidy, go vet and staticcheck must all be clean
lint: tools
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@go mod tidy -diff || { echo "go.mod is not tidy: run go mod tidy"; exit 1; }
	go vet ./...
	go vet -tags iceberg ./...
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags iceberg ./...
	@cd $(RIVER_DIR) && go mod tidy -diff || \
		{ echo "$(RIVER_DIR)/go.mod is not tidy: run (cd $(RIVER_DIR) && go mod tidy), as after any change to the main go.mod"; exit 1; }
	cd $(RIVER_DIR) && go vet ./... && $(STATICCHECK) ./...

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
		bin/naming.test -test.run '^$$' -test.bench '^(BenchmarkCloudTaskID|BenchmarkSHA256Baseline|BenchmarkSHA256AllocBaseline)$$' -test.benchmem >> bench.txt; done
	grep 'SHA256Baseline/' bench.txt | sed 's/SHA256Baseline/HashID/' > bench-baseline.txt
	grep 'SHA256AllocBaseline/' bench.txt | sed 's/SHA256AllocBaseline/HashID/' > bench-alloc.txt
	grep '^BenchmarkCloudTaskID/' bench.txt | sed 's/CloudTaskID/HashID/' > bench-cloudtaskid.txt
	$(BENCHSTAT) bench-baseline.txt bench-alloc.txt bench-cloudtaskid.txt

## bench-river: ctdispatch beside river on one throwaway PostgreSQL
## (bench/river, a module of its own): per call in a caller's transaction,
## 100 per transaction, commit to task against commit to job start, each
## with the counts BENCHMARKS.md ("Beside river") quotes; about 3 minutes
## on 2 cores. Run it on an idle machine: it prints the load average.
bench-river:
	cd $(RIVER_DIR) && go test -c -o ../../bin/riverbench.test .
	cd $(RIVER_DIR) && ../../bin/riverbench.test -test.run '^$$' -test.bench 'InsertTx$$' -test.benchtime 5000x
	cd $(RIVER_DIR) && ../../bin/riverbench.test -test.run '^$$' -test.bench 'InsertManyTx$$' -test.benchtime 300x
	cd $(RIVER_DIR) && ../../bin/riverbench.test -test.run '^$$' -test.bench 'CommitToStart$$' -test.benchtime 400x

## fuzz: a short run of each fuzz target (FUZZTIME=60s to change it)
FUZZTIME ?= 30s
fuzz:
	go test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./naming/
	go test -run '^$$' -fuzz FuzzCloudTaskID -fuzztime $(FUZZTIME) ./naming/
	go test -run '^$$' -fuzz FuzzReadParquet -fuzztime $(FUZZTIME) ./outbox/parquetbox/
	go test -run '^$$' -fuzz FuzzDelivery -fuzztime $(FUZZTIME) ./cloudtasks/worker/

clean:
	rm -rf bin bench.txt bench-baseline.txt bench-alloc.txt bench-cloudtaskid.txt
