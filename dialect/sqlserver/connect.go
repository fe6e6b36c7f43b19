package sqlserver

import (
	"context"
	"database/sql/driver"
	"net"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"
)

// go-mssqldb applies "connection timeout" as a deadline on every read and write
// of a connection for its whole life (its README recommends leaving it 0 and
// using contexts), so with it set any statement running longer than the bound —
// a task body of a minute, a large migration — is cut off as a broken
// connection. stageq needs the bound for the connection attempt only (a server
// that accepts TCP and never answers must not hang a command). So the value,
// from the DSN or dialect.DefaultConnectTimeout, becomes a deadline the dialer
// sets on the new socket and that is cleared once the login has succeeded;
// statements are bounded by their contexts, which the driver honours.

// loginBound wraps a connector so that each new connection's login, and only the
// login, is bounded.
type loginBound struct {
	c *mssql.Connector
}

// socketKey carries, through the context the driver passes to the dialer, where
// to record the socket a Connect opened.
type socketKey struct{}

type socketHolder struct{ conn net.Conn }

// newLoginBound returns a connector for cfg whose logins are bounded by bound and
// whose connections have no deadline afterwards.
func newLoginBound(cfg msdsn.Config, bound time.Duration) driver.Connector {
	cfg.ConnTimeout = 0
	c := mssql.NewConnectorConfig(cfg)
	c.Dialer = &deadlineDialer{nd: net.Dialer{KeepAlive: cfg.KeepAlive}, bound: bound}
	return &loginBound{c: c}
}

// Connect implements driver.Connector.
func (l *loginBound) Connect(ctx context.Context) (driver.Conn, error) {
	h := &socketHolder{}
	conn, err := l.c.Connect(context.WithValue(ctx, socketKey{}, h))
	if err != nil {
		return nil, err
	}
	if h.conn != nil {
		if err := h.conn.SetDeadline(time.Time{}); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (l *loginBound) Driver() driver.Driver { return l.c.Driver() }

// deadlineDialer dials TCP and sets a deadline of bound on the new socket.
type deadlineDialer struct {
	nd    net.Dialer
	bound time.Duration
}

// DialContext implements mssql.Dialer.
func (d *deadlineDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := d.nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if d.bound > 0 {
		if err := conn.SetDeadline(time.Now().Add(d.bound)); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if h, ok := ctx.Value(socketKey{}).(*socketHolder); ok {
		h.conn = conn
	}
	return conn, nil
}
