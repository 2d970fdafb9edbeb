package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/crypto/bcrypt"

	"github.com/smtd/smtd/config"
)

// httpAuth is the HTTP server's basic authentication: the embedded
// server's password users, each with the role it has there (README
// "Security"). A nil *httpAuth lets everyone in.
type httpAuth struct {
	users map[string]*httpUser
}

// httpUser is one user the HTTP server accepts.
type httpUser struct {
	role   string
	secret string // the password, or its bcrypt hash

	// A bcrypt comparison takes tens of milliseconds and the live page
	// asks every few seconds, so the digest of the last password a hash
	// accepted is kept; mu also makes guesses at one user's password
	// wait for each other.
	mu       sync.Mutex
	verified *[sha256.Size]byte
}

// newHTTPAuth reads the password users of cfg's embedded server; nil
// when there are none (config.Observe refuses such a server beyond the
// loopback interface unless observe.allow_unauthenticated).
func newHTTPAuth(cfg *config.Config) (*httpAuth, error) {
	if cfg.NATS.URL != "" || !cfg.NATS.PasswordUsers() {
		return nil, nil
	}
	a := &httpAuth{users: map[string]*httpUser{}}
	for i, u := range cfg.NATS.Users {
		if u.User == "" {
			continue // an nkey user cannot answer basic authentication
		}
		pw, err := config.ReadSecret(u.PasswordFile, u.PasswordEnv)
		if err != nil {
			return nil, fmt.Errorf("smtd: nats.users[%d] (%s): %w", i, u.User, err)
		}
		a.users[u.User] = &httpUser{role: u.Role, secret: pw}
	}
	return a, nil
}

// isBcrypt reports whether a secret is a bcrypt hash, which is compared
// as such, as the NATS server does.
func isBcrypt(s string) bool {
	return strings.HasPrefix(s, "$2a$") || strings.HasPrefix(s, "$2b$") || strings.HasPrefix(s, "$2y$")
}

// accepts reports whether password is the user's.
func (u *httpUser) accepts(password string) bool {
	if !isBcrypt(u.secret) {
		return subtle.ConstantTimeCompare([]byte(password), []byte(u.secret)) == 1
	}
	sum := sha256.Sum256([]byte(password))
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.verified != nil && subtle.ConstantTimeCompare(sum[:], u.verified[:]) == 1 {
		return true
	}
	if bcrypt.CompareHashAndPassword([]byte(u.secret), []byte(password)) != nil {
		return false
	}
	u.verified = &sum
	return true
}

// require lets through to h only the users of the given roles: 401 with
// a basic authentication challenge without a valid user and password,
// 403 for a user of another role.
func (a *httpAuth) require(h http.Handler, roles ...string) http.Handler {
	if a == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, password, ok := r.BasicAuth()
		u := a.users[name]
		if !ok || u == nil || !u.accepts(password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="smtd", charset="UTF-8"`)
			httpError(w, http.StatusUnauthorized, "a user of nats.users with its password is needed")
			return
		}
		if !slices.Contains(roles, u.role) {
			httpError(w, http.StatusForbidden, fmt.Sprintf("%s is a %s; %s needs the role %s", name, u.role, r.URL.Path, strings.Join(roles, " or ")))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// observeTLS returns ln serving TLS as observe.tls says, or ln itself
// when it is not set. The config is built as the embedded NATS server's
// (secureEmbedded): with CAFile, client certificates are required.
func observeTLS(ln net.Listener, t config.TLS) (net.Listener, error) {
	if !t.Enabled() {
		return ln, nil
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile, Verify: t.CAFile != "",
	})
	if err != nil {
		return nil, fmt.Errorf("smtd: observe.tls: %w", err)
	}
	return tls.NewListener(ln, tc), nil
}
