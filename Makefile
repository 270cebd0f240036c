# Outbox: make help lists the targets.
SHELL := /bin/bash
GOLANGCI_LINT_VERSION := 2.15.0
GOBIN ?= $(shell go env GOPATH)/bin
GOLANGCI_LINT := $(GOBIN)/golangci-lint
# Every module of the go.work, in order.
MODULES := $(shell go list -m -f '{{.Dir}}' | sed "s|^$(CURDIR)|.|")

.PHONY: help test vet lint unit fuzz fuzz-short bench tools tidy demo

# FUZZTIME bounds each fuzz target: short in `make test`, longer with `make fuzz`.
FUZZTIME ?= 15s

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

test: vet lint unit fuzz-short ## go vet, golangci-lint, go test -race over every module, and the fuzz targets briefly

vet: ## go vet every module
	@for m in $(MODULES); do echo "== vet $$m"; (cd $$m && go vet ./...) || exit 1; done

lint: tools ## golangci-lint (pinned) every module, and check each go.mod is tidy on its own
	@for m in $(MODULES); do echo "== lint $$m"; (cd $$m && $(GOLANGCI_LINT) run --allow-parallel-runners ./... && GOWORK=off go mod tidy -diff) || exit 1; done

unit: ## go test -race every module
	@for m in $(MODULES); do echo "== test $$m"; (cd $$m && go test -race -count=1 -timeout 20m ./...) || exit 1; done

fuzz-short: ## every fuzz target of the root module for $(FUZZTIME) (15s)
	@for f in $$(go test -list '^Fuzz' . | grep '^Fuzz'); do echo "== fuzz $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) . || exit 1; done

fuzz: ## every fuzz target of the root module for 5 minutes
	@$(MAKE) --no-print-directory fuzz-short FUZZTIME=5m

bench: ## benchmark programs and Go benchmarks; writes bench/RESULTS.md
	cd bench && go run ./cmd/writerbench -out RESULTS.md
	cd bench && go run ./cmd/relaybench -part all -out RESULTS.md
	cd bench && go test -run '^$$' -bench . ./...

demo: ## run the orders example end to end with a relay kill and a broker outage (ARGS="--duration 1m --rate 200")
	cd cmd/outbox && go run . demo $(ARGS)

tidy: ## go mod tidy every module on its own
	@for m in $(MODULES); do (cd $$m && GOWORK=off go mod tidy) || exit 1; done

tools: ## install the pinned golangci-lint when missing or of another version
	@if ! $(GOLANGCI_LINT) version 2>/dev/null | grep -q "version $(GOLANGCI_LINT_VERSION) "; then \
		echo "installing golangci-lint v$(GOLANGCI_LINT_VERSION)"; \
		GOBIN=$(GOBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION); \
	fi
