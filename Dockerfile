# stageq's three commands (worker, enqueue, queuectl) in one small image.
# Multi-stage: a Go toolchain builds static binaries (every driver is pure Go:
# go-mssqldb, pgx, modernc.org/sqlite), and a distroless image runs them as a
# non-root user with nothing else inside (no shell, no package manager).
#
#   docker build -t stageq .
#   docker run --rm -e STAGEQ_DSN=sqlserver://... stageq worker

# go.mod asks for Go 1.26.x; a newer patch is fetched by the go command if needed.
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that editing the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/worker ./cmd/enqueue ./cmd/queuectl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
# The DSN comes from the environment (STAGEQ_DSN) so it stays out of `ps` output.
ENTRYPOINT ["/usr/local/bin/worker"]
