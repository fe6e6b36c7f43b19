# stageq — run `make help` for the targets.
GO       ?= go
BIN      := bin
PKGS     := ./...
TESTFLAGS ?= -race -count=1 -timeout 25m

.DEFAULT_GOAL := help

## help: list the targets
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  /'

## build: build worker, enqueue and queuectl into bin/
build:
	$(GO) build -o $(BIN)/ ./cmd/worker ./cmd/enqueue ./cmd/queuectl

## demo: seed 001's experiment on embedded SQLite (no server): 3 workers, 9 tasks, 5 stages, then the Logs table
demo: build
	./scripts/demo.sh

## test: vet, then every test (SQLite and PostgreSQL; SQL Server when STAGEQ_SQLSERVER_DSN is set) with -race
test: lint
	./scripts/ensure-postgres.sh
	$(GO) test $(TESTFLAGS) $(PKGS)

## test/short: the tests without -race, for a quick loop
test/short:
	./scripts/ensure-postgres.sh
	$(GO) test -count=1 $(PKGS)

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## clean: remove built binaries and demo databases
clean:
	rm -rf $(BIN) demo.db demo.db-wal demo.db-shm

.PHONY: help build demo test test/short lint clean
