package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nkeys"
)

// ErrSecret means a password or token could not be read from the file or
// the environment variable that should hold it.
var ErrSecret = errors.New("config: secret")

// ReadSecret returns the secret in file, or else in the environment
// variable env: exactly one of them is set. A file's trailing white space
// (its final newline) is dropped; an empty secret is an error.
func ReadSecret(file, env string) (string, error) {
	var s string
	switch {
	case file != "" && env != "":
		return "", fmt.Errorf("%w: both a file (%s) and an environment variable (%s) are given", ErrSecret, file, env)
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrSecret, err)
		}
		if s = strings.TrimRight(string(data), " \t\r\n"); s == "" {
			return "", fmt.Errorf("%w: %s is empty", ErrSecret, file)
		}
	case env != "":
		if s = os.Getenv(env); s == "" {
			return "", fmt.Errorf("%w: environment variable %s is unset or empty", ErrSecret, env)
		}
	default:
		return "", fmt.Errorf("%w: neither a file nor an environment variable is given", ErrSecret)
	}
	return s, nil
}

// IsLoopback reports whether the host of a host:port address is a
// loopback address or "localhost". An empty host listens on every
// interface and is not loopback; so is any other name, which could
// resolve anywhere.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateSecurity checks users, TLS and credentials: the embedded server's
// side when URL is empty, the client side of an external server otherwise.
func (n *NATS) validateSecurity(v *validator) {
	if n.URL != "" {
		v.check(len(n.Users) == 0, "nats.users", "apply to the embedded server only; an external server has its own users (authenticate to it with nats.auth)")
		v.check(!n.AllowUnauthenticated, "nats.allow_unauthenticated", "applies to the embedded server only (nats.url is set)")
		n.Auth.validate(v, "nats.auth")
		v.check((n.TLS.CertFile == "") == (n.TLS.KeyFile == ""), "nats.tls", "a client certificate needs both cert_file and key_file")
		n.TLS.checkFiles(v, "nats.tls")
		return
	}
	v.check(!n.Auth.Enabled(), "nats.auth", "is for an external server (nats.url); for the embedded server the daemon makes its own identity at every start")
	if len(n.Users) == 0 {
		v.check(n.AllowUnauthenticated || !validListen(n.Listen) || IsLoopback(n.Listen), "nats.listen",
			"%q is beyond the loopback interface and nats.users is empty: anyone who reaches it could reload, checkpoint, delete streams and plant checkpoints; add nats.users, or set nats.allow_unauthenticated: true to accept that", n.Listen)
	} else {
		v.check(!n.AllowUnauthenticated, "nats.allow_unauthenticated", "must be false with nats.users: anonymous clients are refused")
	}
	if n.TLS.Enabled() {
		v.check(n.TLS.CertFile != "" && n.TLS.KeyFile != "", "nats.tls", "the embedded server needs both cert_file and key_file")
		n.TLS.checkFiles(v, "nats.tls")
	}
	names := map[string]string{}
	for i, u := range n.Users {
		path := fmt.Sprintf("nats.users[%d]", i)
		v.check(oneOf(u.Role, RoleProducer, RoleConsumer, RoleOperator), path+".role", "must be producer, consumer or operator, got %q", u.Role)
		switch {
		case u.User != "" && u.NKey != "":
			v.check(false, path, "give user or nkey, not both")
		case u.User != "":
			v.check(!strings.ContainsAny(u.User, " \t\r\n"), path+".user", "must not contain white space, got %q", u.User)
			checkSecret(v, path, "password", u.PasswordFile, u.PasswordEnv)
		case u.NKey != "":
			v.check(nkeys.IsValidPublicUserKey(u.NKey), path+".nkey", "must be a public user nkey (U...), got %q", u.NKey)
			v.check(u.PasswordFile == "" && u.PasswordEnv == "", path, "an nkey user has no password")
		default:
			v.check(false, path, "needs user (with password_file or password_env) or nkey")
		}
		id := u.User + u.NKey
		if other, dup := names[id]; dup && id != "" {
			v.check(false, path, "duplicate user %q (also %s)", id, other)
		}
		names[id] = path
	}
}

func (a *ClientAuth) validate(v *validator, path string) {
	var methods []string
	if a.CredentialsFile != "" {
		methods = append(methods, "credentials_file")
		checkFile(v, path+".credentials_file", a.CredentialsFile)
	}
	if a.NKeyFile != "" {
		methods = append(methods, "nkey_file")
		checkFile(v, path+".nkey_file", a.NKeyFile)
	}
	if a.User != "" {
		methods = append(methods, "user")
		checkSecret(v, path, "password", a.PasswordFile, a.PasswordEnv)
	} else {
		v.check(a.PasswordFile == "" && a.PasswordEnv == "", path, "a password needs a user")
	}
	if a.TokenFile != "" || a.TokenEnv != "" {
		methods = append(methods, "token")
		checkSecret(v, path, "token", a.TokenFile, a.TokenEnv)
	}
	v.check(len(methods) <= 1, path, "give one way to authenticate, got %s", strings.Join(methods, " and "))
}

// checkSecret checks that exactly one of file and env is set and that the
// secret can be read; what is one of password or token.
func checkSecret(v *validator, path, what, file, env string) {
	if file != "" && env != "" {
		v.check(false, path, "give %s_file or %s_env, not both", what, what)
		return
	}
	if file == "" && env == "" {
		v.check(false, path, "needs %s_file or %s_env (secrets are never written in the config)", what, what)
		return
	}
	if _, err := ReadSecret(file, env); err != nil {
		field := path + "." + what + "_file"
		if env != "" {
			field = path + "." + what + "_env"
		}
		v.check(false, field, "%v", strings.TrimPrefix(err.Error(), ErrSecret.Error()+": "))
	}
}

func (t *TLS) checkFiles(v *validator, path string) {
	checkFile(v, path+".cert_file", t.CertFile)
	checkFile(v, path+".key_file", t.KeyFile)
	checkFile(v, path+".ca_file", t.CAFile)
}

// validateSecurity checks who may reach the HTTP server: an address
// beyond the loopback interface needs the embedded server's password
// users, whom it then asks for, or client certificates (TLS.CAFile), or
// AllowUnauthenticated.
func (o *Observe) validateSecurity(v *validator, n *NATS) {
	users := n.URL == "" && n.PasswordUsers()
	if o.HTTP != "" && !users && o.TLS.CAFile == "" && validHTTPAddr(o.HTTP) {
		v.check(o.AllowUnauthenticated || IsLoopback(o.HTTP), "observe.http",
			"%q is beyond the loopback interface and nats.users has no password user: anyone who reaches it could see the metrics and the models and embed; add nats.users with passwords (the server then asks for them) or observe.tls with ca_file (it then asks for client certificates), or set observe.allow_unauthenticated: true to accept that", o.HTTP)
	}
	v.check(!o.AllowUnauthenticated || !users, "observe.allow_unauthenticated", "must be false with password users in nats.users: the HTTP server asks for them")
	if o.TLS.Enabled() {
		v.check(o.TLS.CertFile != "" && o.TLS.KeyFile != "", "observe.tls", "HTTPS needs both cert_file and key_file")
		o.TLS.checkFiles(v, "observe.tls")
	}
}

// checkFile checks that file, if named, can be read.
func checkFile(v *validator, field, file string) {
	if file == "" {
		return
	}
	f, err := os.Open(file)
	if err == nil {
		f.Close()
	}
	v.check(err == nil, field, "%v", err)
}
