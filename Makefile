# Sluice: the test command is `make test`.
GO ?= go
PKGS ?= ./...
BENCH ?= .
BENCHTIME ?= 1s

.PHONY: test test-deps check vet lint bench fuzz run

## FUZZTIME is an execution count, never a duration: under a duration Go's fuzz coordinator can
## fail the run with "context deadline exceeded" and no crasher (golang/go#75804), and a count
## does as much work on a busy machine as on an idle one, only slower. 5000x takes about 10s on
## an idle 2-core machine. For a long run: make fuzz FUZZTIME=1000000x.
FUZZTIME ?= 5000x
FUZZMINIMIZETIME ?= 200x

## test: install what the tests need (redis-server, prometheus/promtool, chromium, postgresql), check
## that go.mod is tidy and the sources gofmt-formatted, vet, run every test with -race, then fuzz the
## token counter against tiktoken-go for FUZZTIME executions (both encodings per input). No test bounds
## wall-clock time, so all run together whatever else the machine is doing.
## The tests that count allocations of pooled state run without -race too: the race detector makes
## sync.Pool drop a random part of what is put back (their files say //go:build !race).
## The scale tests of admitctl (100,000 tenants through check, and through an import into PostgreSQL
## and back) also run without -race: they prove size, not concurrency, and the race detector makes
## them three to four times slower (their file says //go:build !race).
ALLOCS ?= AllocateNothing$$
SCALE ?= Large
test: test-deps check vet
	$(GO) test -race -count=1 -timeout 10m $(PKGS)
	$(GO) test -count=1 -timeout 2m -run '$(ALLOCS)' ./admission
	$(GO) test -count=1 -timeout 10m -run '$(SCALE)' ./cmd/admitctl
	$(MAKE) fuzz

## fuzz: compare the token counter with tiktoken-go on FUZZTIME fuzzed inputs, and fuzz the AWS
## event-stream decoder (Bedrock's ConverseStream framing) for as many.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCountMatchesTiktoken$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./weights/bpe
	$(GO) test -run '^$$' -fuzz '^FuzzDecoder$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./internal/eventstream

## check: go.mod and go.sum are what go mod tidy makes, and every Go file is gofmt-formatted.
check:
	@diff=$$($(GO) mod tidy -diff) && exit 0; \
	if [ -n "$$diff" ]; then echo "go.mod or go.sum is not tidy: run 'go mod tidy' and commit the result:"; echo "$$diff"; \
	else echo "go mod tidy -diff failed (see the error above)"; fi; exit 1
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "not gofmt-formatted (run gofmt -w on them):"; echo "$$out"; exit 1; fi

test-deps:
	./scripts/test-deps.sh

vet:
	$(GO) vet $(PKGS)

## lint: check plus vet.
lint: check vet

## bench: every benchmark, peers side by side, with allocations.
bench: test-deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

## run: the LLM proxy with its embedded default configuration and simulated upstream.
run:
	$(GO) run ./examples/llmproxy
