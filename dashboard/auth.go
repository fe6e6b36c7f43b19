package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Access is who may use the dashboard. With neither a token nor a user, anyone
// who reaches the address may (serve refuses that on a non-loopback address).
// The secrets come from the environment (see internal/cli/serve.go) and are
// never logged or shown.
type Access struct {
	// Token is accepted as a bearer token or as the password of HTTP basic
	// authentication with any user name (so a browser can sign in).
	Token string
	// User and Password are HTTP basic-authentication credentials.
	User, Password string
}

// Required reports whether requests must carry credentials.
func (a Access) Required() bool { return a.Token != "" || a.User != "" }

// allows checks a request's credentials in constant time.
func (a Access) allows(r *http.Request) bool {
	if !a.Required() {
		return true
	}
	if a.Token != "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(b, a.Token) {
			return true
		}
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	if a.Token != "" && equal(pass, a.Token) {
		return true
	}
	return a.User != "" && equal(user, a.User) && equal(pass, a.Password)
}

func equal(a, b string) bool {
	// Hash first so the comparison takes the same time whatever the lengths.
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// IsLoopback reports whether a listen address only accepts local connections:
// a loopback IP or localhost. An empty host (every interface) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackName(host)
}

// loopbackName reports whether host (no port) is localhost or a loopback IP.
func loopbackName(host string) bool {
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a request's Host names this machine's loopback:
// localhost (or a name under .localhost, which resolves there by RFC 6761) or a
// loopback IP, with or without a port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return loopbackName(host) || strings.HasSuffix(host, ".localhost")
}

const sessionCookie = "stageq_session"

// session returns the browser's session id, setting a new one when it has none.
// The CSRF token of every form is an HMAC of it under the server's key: a page
// of another site can neither read it nor compute it.
func (s *Server) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	b := make([]byte, 32)
	rand.Read(b)
	id := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return id
}

func (s *Server) csrfToken(session string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))
}

// checkCSRF admits a POST only with the session cookie, the token of that
// session, and (when the browser says) a same-origin request: one whose
// Origin names the host it was sent to, or one of Config.Origins. It says why
// it refused, for the 403 page.
func (s *Server) checkCSRF(r *http.Request) error {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) != 64 {
		return errors.New("no session cookie (reload the page and try again)")
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrfToken(c.Value))) {
		return errors.New("missing or wrong CSRF token (reload the page and try again)")
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("a %s request: actions are taken from the dashboard's own pages only", site)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || (u.Host != r.Host && !slices.Contains(s.cfg.Origins, NormalOrigin(u))) {
			// Behind a proxy that rewrites Host, the browser's origin is the
			// proxy's public name: the operator names it (serve --origin).
			return fmt.Errorf("the page that sent it is not this dashboard's (its origin is %s; the dashboard was reached as %s); if that is the address browsers use behind a proxy that rewrites Host, start the dashboard with --origin set to it", o, r.Host)
		}
	}
	return nil
}

// NormalOrigin is u's origin as browsers send it: scheme://host[:port], lower
// case, without a default port.
func NormalOrigin(u *url.URL) string {
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if h, p, err := net.SplitHostPort(host); err == nil && (scheme == "https" && p == "443" || scheme == "http" && p == "80") {
		host = h
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
	}
	return scheme + "://" + host
}
