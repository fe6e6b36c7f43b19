package sqlserver

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// The deployment files at the repository root. There is no Docker engine on the
// development machines, so these tests check the files without running them:
// compose-spec/compose-go validates docker-compose.yml against the Compose
// Specification's schema and resolves it, as `docker compose config` would.
const (
	composeFile = "../../docker-compose.yml"
	dockerfile  = "../../Dockerfile"
)

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	content, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Dir(composeFile))
	if err != nil {
		t.Fatal(err)
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml"), Content: content}},
		Environment: types.Mapping{}, // the file's own defaults, not this machine's environment
	}, func(o *loader.Options) { o.SetProjectName("stageq", true) })
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return project
}

func TestComposeFile(t *testing.T) {
	p := loadCompose(t)
	want := []string{"sqlserver", "db-init", "migrate", "worker1", "worker2", "worker3", "demo"}
	for _, name := range want {
		if _, ok := p.Services[name]; !ok {
			t.Errorf("service %s missing; have %v", name, p.ServiceNames())
		}
	}
	if t.Failed() {
		return
	}

	db := p.Services["sqlserver"]
	if db.Image != "mcr.microsoft.com/mssql/server:2022-latest" {
		t.Errorf("sqlserver image = %q", db.Image)
	}
	if v := db.Environment["ACCEPT_EULA"]; v == nil || *v != "Y" {
		t.Error("sqlserver: ACCEPT_EULA must be Y")
	}
	if v := db.Environment["MSSQL_SA_PASSWORD"]; v == nil || *v == "" {
		t.Error("sqlserver: MSSQL_SA_PASSWORD must be set (SA_PASSWORD is deprecated)")
	}
	if db.HealthCheck == nil || len(db.HealthCheck.Test) == 0 {
		t.Fatal("sqlserver: no health check")
	}
	hc := strings.Join(db.HealthCheck.Test, " ")
	if !strings.Contains(hc, "/opt/mssql-tools18/bin/sqlcmd") || !regexp.MustCompile(`\s-C\b`).MatchString(hc) {
		t.Errorf("sqlserver: health check %q should run /opt/mssql-tools18/bin/sqlcmd with -C", hc)
	}
	if strings.Contains(hc, "Stageq_Demo_2024") {
		t.Errorf("sqlserver: the health check has the password in clear: %q", hc)
	}

	oneShot := func(name string, after string, condition string) {
		t.Helper()
		s := p.Services[name]
		if s.Restart != "no" {
			t.Errorf("%s: a one-shot service must not restart (restart %q)", name, s.Restart)
		}
		dep, ok := s.DependsOn[after]
		if !ok || dep.Condition != condition {
			t.Errorf("%s: must depend on %s with condition %s, has %+v", name, after, condition, s.DependsOn)
		}
	}
	oneShot("db-init", "sqlserver", types.ServiceConditionHealthy)
	oneShot("migrate", "db-init", types.ServiceConditionCompletedSuccessfully)
	oneShot("demo", "migrate", types.ServiceConditionCompletedSuccessfully)

	m := p.Services["migrate"]
	if cmd := strings.Join(append(append([]string{}, m.Entrypoint...), m.Command...), " "); !strings.HasSuffix(cmd, "queuectl migrate up") {
		t.Errorf("migrate runs %q, want queuectl migrate up", cmd)
	}
	for _, name := range []string{"migrate", "worker1", "worker2", "worker3"} {
		s := p.Services[name]
		if s.Build == nil || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s: must be built from the repository's Dockerfile", name)
		}
		dsn := s.Environment["STAGEQ_DSN"]
		if dsn == nil || !strings.HasPrefix(*dsn, "sqlserver://") || !strings.Contains(*dsn, "@sqlserver:1433") {
			t.Errorf("%s: STAGEQ_DSN must point at the sqlserver service, got %v", name, dsn)
		}
	}
	for _, name := range []string{"worker1", "worker2", "worker3"} {
		s := p.Services[name]
		if cmd := strings.Join(s.Entrypoint, " "); !strings.HasSuffix(cmd, "/worker") {
			t.Errorf("%s runs %q, want the worker", name, cmd)
		}
		if dep, ok := s.DependsOn["migrate"]; !ok || dep.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: must wait for the migration", name)
		}
	}

	demo := strings.Join(p.Services["demo"].Command, " ")
	if n := strings.Count(demo, "EXEC stageq.Enqueue"); n != 9 {
		t.Errorf("demo enqueues %d tasks, want the seed's 9", n)
	}
	for _, order := range []string{"100", "200", "300", "400", "500"} {
		if !strings.Contains(demo, "''', "+order+";") {
			t.Errorf("demo: no task of order %s", order)
		}
	}
	if !strings.Contains(demo, "WAITFOR DELAY") || !strings.Contains(demo, "BEGIN TRANSACTION") || !strings.Contains(demo, "COMMIT") {
		t.Error("demo: the nine WAITFOR DELAY tasks must be enqueued in one transaction")
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if n := len(regexp.MustCompile(`(?m)^FROM\s`).FindAllString(s, -1)); n < 2 {
		t.Errorf("Dockerfile has %d stages, want a multi-stage build", n)
	}
	if !regexp.MustCompile(`go build .*\./cmd/worker .*\./cmd/enqueue .*\./cmd/queuectl`).MatchString(s) {
		t.Error("Dockerfile does not build ./cmd/worker ./cmd/enqueue ./cmd/queuectl")
	}
	if !strings.Contains(s, "COPY --from=build") || !regexp.MustCompile(`(?m)^USER\s+nonroot`).MatchString(s) {
		t.Error("Dockerfile: the run stage should copy the binaries from the build stage and run as a non-root user")
	}
}
