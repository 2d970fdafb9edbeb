package daemon

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/smtd/smtd/config"
)

// httpAuth is the HTTP server's basic authentication: the embedded
// server's password users, each with the role it has there (README
// "Security"). A nil *httpAuth lets everyone in.
type httpAuth struct {
	users map[string]*httpUser
	// unknown answers for a user name that is not in users, with a secret
	// of the users' kind (a bcrypt hash of their cost if any has one), so
	// that a wrong name takes as long to refuse as a wrong password.
	unknown *httpUser
	limit   loginLimit
	log     zerolog.Logger
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
func newHTTPAuth(cfg *config.Config, log zerolog.Logger) (*httpAuth, error) {
	if cfg.NATS.URL != "" || !cfg.NATS.PasswordUsers() {
		return nil, nil
	}
	a := &httpAuth{users: map[string]*httpUser{}, limit: loginLimit{window: loginWindow, failures: map[string]int{}}, log: log}
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
	unknown, err := unknownSecret(a.users)
	if err != nil {
		return nil, fmt.Errorf("smtd: monitoring server: %w", err)
	}
	a.unknown = &httpUser{secret: unknown}
	return a, nil
}

// unknownSecret returns a secret no password matches, of the users' kind:
// a bcrypt hash of a random password at the highest cost among theirs, or
// a random string if none is a hash.
func unknownSecret(users map[string]*httpUser) (string, error) {
	random := make([]byte, 32)
	rand.Read(random)
	cost := 0
	for _, u := range users {
		if c, err := bcrypt.Cost([]byte(u.secret)); err == nil && isBcrypt(u.secret) {
			cost = max(cost, c)
		}
	}
	if cost == 0 {
		return hex.EncodeToString(random), nil
	}
	h, err := bcrypt.GenerateFromPassword([]byte(hex.EncodeToString(random[:24])), cost)
	return string(h), err
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
		client := clientHost(r)
		if ok {
			if wait := a.limit.refused(client, time.Now()); wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
				httpError(w, http.StatusTooManyRequests, fmt.Sprintf("%d failed logins from %s: try again in %s", loginFailures, client, wait.Round(time.Second)))
				return
			}
		}
		u, known := a.users[name]
		if !known {
			u = a.unknown
		}
		if !ok || !u.accepts(password) || !known {
			if ok && a.limit.failed(client, time.Now()) {
				a.log.Warn().Str("client", client).Str("user", name).Dur("for", a.limit.window).
					Msg("monitoring server: too many failed logins, refusing the client's logins for a while")
			}
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

// Failed logins allowed from one client address within loginWindow
// before its logins are refused until the window ends, and how many
// addresses are followed at once.
const (
	loginFailures = 10
	loginWindow   = time.Minute
	loginClients  = 10000
)

// loginLimit counts failed logins (credentials given and wrong) by
// client address in fixed windows. A client with loginFailures of them
// in the current window has every login refused, right or wrong, until
// the window ends: guesses cost an attacker a window each ten, while a
// user who mistyped waits at most a minute. Past loginClients addresses
// in one window new ones are not followed (memory stays bounded; their
// guesses are slowed by bcrypt alone).
type loginLimit struct {
	mu       sync.Mutex
	window   time.Duration
	start    time.Time
	failures map[string]int
}

// roll starts a new window if the current one has ended.
func (l *loginLimit) roll(now time.Time) {
	if now.Sub(l.start) >= l.window {
		l.start = now
		clear(l.failures)
	}
}

// refused returns how long logins from client stay refused: 0 if they
// are not.
func (l *loginLimit) refused(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roll(now)
	if l.failures[client] < loginFailures {
		return 0
	}
	return l.start.Add(l.window).Sub(now)
}

// failed counts a failed login from client and reports whether it is the
// one that makes the client refused.
func (l *loginLimit) failed(client string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roll(now)
	n, seen := l.failures[client]
	if !seen && len(l.failures) >= loginClients {
		return false
	}
	l.failures[client] = n + 1
	return n+1 == loginFailures
}

// clientHost is the address a request came from, without its port. A
// proxy in front of the server makes all its clients one address.
func clientHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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
