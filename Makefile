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
	@[ -n "$$STAGEQ_SQLSERVER_DSN" ] || echo "make test: STAGEQ_SQLSERVER_DSN is not set: the SQL Server conformance suite is skipped"
	$(GO) test $(TESTFLAGS) $(PKGS)

## test/short: the tests without -race, for a quick loop
test/short:
	./scripts/ensure-postgres.sh
	$(GO) test -count=1 $(PKGS)

## bench: benchmark suite on PostgreSQL and SQLite (SQL Server when STAGEQ_SQLSERVER_DSN is set), table + JSON lines; BENCHFLAGS=-quick for a smoke run
bench:
	./scripts/ensure-postgres.sh
	$(GO) run ./cmd/stageq-bench $(BENCHFLAGS)

## bench/micro: per-dialect go test benchmarks of claim and finish (compare runs with benchstat)
bench/micro:
	./scripts/ensure-postgres.sh
	$(GO) test -run '^$$' -bench . -count 6 ./bench/ ./dialect/postgres/

## test/sqlserver: the conformance suite against the docker-compose SQL Server (needs a Docker engine)
test/sqlserver:
	docker compose up -d --wait sqlserver
	STAGEQ_SQLSERVER_DSN='sqlserver://sa:$(or $(MSSQL_SA_PASSWORD),Stageq_Demo_2024)@127.0.0.1:1433?database=master&TrustServerCertificate=true' \
	  $(GO) test -count=1 -timeout 25m ./conformance/ ./dialect/sqlserver/

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## clean: remove built binaries and demo databases
clean:
	rm -rf $(BIN) demo.db demo.db-wal demo.db-shm

.PHONY: help build demo test test/short test/sqlserver bench bench/micro lint clean
