# Sluice: the test command is `make test`.
GO ?= go
PKGS ?= ./...
BENCH ?= .
BENCHTIME ?= 1s

.PHONY: test test-deps vet lint bench fuzz run

FUZZTIME ?= 40s

## test: install what the tests need (redis-server, prometheus/promtool, chromium, postgresql), vet, run every test with -race,
## then fuzz the token counter against tiktoken-go for a bounded time (both encodings per input).
## The tests that bound wall-clock latency (TIMED) run after the others, alone, so that the other
## packages' tests (Chromium among them) running on the same cores do not decide them.
TIMED ?= ^(TestFaults|TestStalledReaderOfAPlainAnswerIsCut)$$
## The tests that count allocations of pooled state run without -race too: the race detector makes
## sync.Pool drop a random part of what is put back (their files say //go:build !race).
ALLOCS ?= AllocateNothing$$
test: test-deps vet
	$(GO) test -race -count=1 -timeout 9m -skip '$(TIMED)' $(PKGS)
	$(GO) test -race -count=1 -timeout 5m -run '$(TIMED)' ./admission/redisstore ./examples/llmproxy
	$(GO) test -count=1 -timeout 2m -run '$(ALLOCS)' ./admission
	$(MAKE) fuzz

## fuzz: compare the token counter with tiktoken-go on fuzzed input for FUZZTIME (make fuzz FUZZTIME=10m for a long run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCountMatchesTiktoken$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./weights/bpe

test-deps:
	./scripts/test-deps.sh

vet:
	$(GO) vet $(PKGS)

## lint: gofmt check plus vet.
lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## bench: every benchmark, peers side by side, with allocations.
bench: test-deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

## run: the LLM proxy with its embedded default configuration and simulated upstream.
run:
	$(GO) run ./examples/llmproxy
