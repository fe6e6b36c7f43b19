package sqlserver

import (
	"context"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Exclusive leases (dialect.Scheduler): a named lock with a holder, an expiry on
// the database's clock and a fencing token. The row outlives its holders so the
// token keeps growing. sqlbase runs the statements (base.go); the methods here
// first refuse what the columns cannot hold.

// leaseAcquireSQL takes lease @Name for @Holder for @TtlMs, in one transaction:
// take over a released or expired lease (token + 1: the fence every earlier
// holder's writes are checked against), re-acquire the holder's own live lease
// (same token: reentrant), or insert a new one (token 1). UPDLOCK + SERIALIZABLE
// on the name key makes "update, else insert" atomic: a second acquirer of the
// same name waits for the first to commit and then sees its row. When another
// holder has a live lease, nothing changes and no row comes back (sqlbase then
// reads the holder with leaseGetSQL). In: name, holder, ttl ms. Out: token,
// acquired_at, expires_at, now.
const leaseAcquireSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @Name nvarchar(200) = @pName,
        @Holder nvarchar(200) = @pHolder,
        @TtlMs bigint = @pTtlMs,
        @Now datetime2(7),
        @Expires datetime2(7);
DECLARE @Out TABLE (token bigint NOT NULL, acquired_at datetime2(7) NOT NULL, expires_at datetime2(7) NOT NULL);
BEGIN TRANSACTION;
SET @Now = SYSUTCDATETIME();
SET @Expires = DATEADD(millisecond, CONVERT(int, @TtlMs % 1000), DATEADD(second, CONVERT(int, @TtlMs / 1000), @Now));
UPDATE l
   SET token = CASE WHEN l.holder = @Holder AND l.expires_at > @Now THEN l.token ELSE l.token + 1 END,
       acquired_at = CASE WHEN l.holder = @Holder AND l.expires_at > @Now THEN l.acquired_at ELSE @Now END,
       holder = @Holder, expires_at = @Expires, updated_at = @Now
OUTPUT inserted.token, inserted.acquired_at, inserted.expires_at INTO @Out (token, acquired_at, expires_at)
  FROM stageq.ExclusiveLeases AS l WITH (UPDLOCK, SERIALIZABLE, ROWLOCK)
 WHERE l.name = @Name AND (l.holder IS NULL OR l.expires_at <= @Now OR l.holder = @Holder);
IF @@ROWCOUNT = 0
BEGIN
    IF NOT EXISTS (SELECT 1 FROM stageq.ExclusiveLeases AS l WITH (UPDLOCK, SERIALIZABLE, ROWLOCK) WHERE l.name = @Name)
        INSERT INTO stageq.ExclusiveLeases (name, holder, token, acquired_at, expires_at, updated_at)
        OUTPUT inserted.token, inserted.acquired_at, inserted.expires_at INTO @Out (token, acquired_at, expires_at)
        VALUES (@Name, @Holder, 1, @Now, @Expires, @Now);
END;
COMMIT TRANSACTION;
SELECT o.token, o.acquired_at, o.expires_at, @Now FROM @Out AS o;`

// leaseGetSQL reads one lease, for the message of a refused acquire. In: name.
// Out: holder, token, acquired_at, expires_at, now.
const leaseGetSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName;
SELECT COALESCE(l.holder, N''), l.token, l.acquired_at, l.expires_at, SYSUTCDATETIME()
  FROM stageq.ExclusiveLeases AS l
 WHERE l.name = @Name;`

// LeaseTryAcquire implements dialect.Scheduler (sqlbase; retried: a lost
// answer leaves the lease with this holder, and acquiring it again returns the
// same token).
func (d *SQLServer) LeaseTryAcquire(ctx context.Context, lp dialect.LeaseAcquireParams) (dialect.LeaseInfo, bool, error) {
	if err := leaseCheck(lp.Name, lp.Holder, lp.TTL); err != nil {
		return dialect.LeaseInfo{Name: lp.Name}, false, fmt.Errorf("acquire lease %q: %w", lp.Name, err)
	}
	return d.Base.LeaseTryAcquire(ctx, lp)
}

// leaseExtendSQL pushes the expiry of a live lease held with the token. In: name,
// holder, token, ttl ms. Out: acquired_at, expires_at, now; no row when lost.
const leaseExtendSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName,
        @Holder nvarchar(200) = @pHolder,
        @Token bigint = @pToken,
        @TtlMs bigint = @pTtlMs,
        @Now datetime2(7) = SYSUTCDATETIME();
UPDATE l
   SET expires_at = DATEADD(millisecond, CONVERT(int, @TtlMs % 1000), DATEADD(second, CONVERT(int, @TtlMs / 1000), @Now)),
       updated_at = @Now
OUTPUT inserted.acquired_at, inserted.expires_at, @Now
  FROM stageq.ExclusiveLeases AS l WITH (ROWLOCK)
 WHERE l.name = @Name AND l.holder = @Holder AND l.token = @Token AND l.expires_at > @Now;`

// LeaseExtend implements dialect.Scheduler (sqlbase; retried: extending twice
// is harmless).
func (d *SQLServer) LeaseExtend(ctx context.Context, lp dialect.LeaseExtendParams) (dialect.LeaseInfo, error) {
	if err := leaseCheck(lp.Name, lp.Holder, lp.TTL); err != nil {
		return dialect.LeaseInfo{Name: lp.Name, Holder: lp.Holder, Token: lp.Token}, fmt.Errorf("extend lease %q: %w", lp.Name, err)
	}
	return d.Base.LeaseExtend(ctx, lp)
}

// leaseReleaseSQL frees a lease, fenced by holder and token; the row stays so the
// next holder's token is higher. In: name, holder, token. Out: rows changed.
const leaseReleaseSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName,
        @Holder nvarchar(200) = @pHolder,
        @Token bigint = @pToken,
        @Now datetime2(7) = SYSUTCDATETIME();
UPDATE l
   SET holder = NULL, expires_at = CASE WHEN l.expires_at < @Now THEN l.expires_at ELSE @Now END, updated_at = @Now
  FROM stageq.ExclusiveLeases AS l WITH (ROWLOCK)
 WHERE l.name = @Name AND l.holder = @Holder AND l.token = @Token;
SELECT @@ROWCOUNT;`

// LeaseRelease implements dialect.Scheduler (sqlbase; retried only when nothing
// can have been committed: a repeated release would report ErrLeaseLost).
func (d *SQLServer) LeaseRelease(ctx context.Context, lp dialect.LeaseReleaseParams) error {
	if err := leaseCheck(lp.Name, lp.Holder, time.Millisecond); err != nil {
		return fmt.Errorf("release lease %q: %w", lp.Name, err)
	}
	return d.Base.LeaseRelease(ctx, lp)
}

// leaseListSQL reads leases by name. In: name (empty for all), held only. Out:
// name, holder, token, acquired_at, expires_at, now.
const leaseListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @HeldOnly bit = @pHeldOnly,
        @Now datetime2(7) = SYSUTCDATETIME();
SELECT l.name, COALESCE(l.holder, N''), l.token, l.acquired_at, l.expires_at, @Now
  FROM stageq.ExclusiveLeases AS l
 WHERE (@Name = N'' OR l.name = @Name)
   AND (@HeldOnly = 0 OR (l.holder IS NOT NULL AND l.expires_at > @Now))
 ORDER BY l.name
OPTION (RECOMPILE);`

// leaseCheck refuses names and holders the columns cannot hold and a TTL the
// statements cannot add (DATEADD takes an int of seconds).
func leaseCheck(name, holder string, ttl time.Duration) error {
	if err := checkLen("lease name", name, maxName); err != nil {
		return err
	}
	if err := checkLen("lease holder", holder, maxName); err != nil {
		return err
	}
	if ttl <= 0 || ttl > 10*365*24*time.Hour {
		return fmt.Errorf("%w: lease TTL must be positive and at most ten years, got %s", dialect.ErrInvalid, ttl)
	}
	return nil
}
