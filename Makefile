# Sluice: the test command is `make test`.
GO ?= go
PKGS ?= ./...
BENCH ?= .
BENCHTIME ?= 1s

.PHONY: test test-deps vet lint bench fuzz run

## test: install what the tests need (redis-server, prometheus/promtool), vet, then run every test with -race.
test: test-deps vet
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

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
