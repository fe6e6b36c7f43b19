// Package dashboard is stageq's web dashboard, served by `queuectl serve`:
// server-rendered html/template pages (templates/) with a little JavaScript
// (static/app.js polls each page's content), all embedded in the binary.
//
// Where things are: server.go (routes, rendering, Config), pages.go (what each
// page reads), actions.go (the confirmed POST actions, through the same
// Operator and Client calls as queuectl), auth.go (loopback, token or basic
// auth, CSRF), why.go (Explain: why a task is not running, also behind
// `queuectl why`), timeline.go (the stage timeline's SVG geometry), metrics.go
// (the queue gauges of /metrics). The database reads it adds to the dialects
// are dialect.Inspector (dialect/inspect.go).
package dashboard
