package main

import (
	"flag"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/smtd/smtd/config"
	"github.com/smtd/smtd/daemon"
)

const defaultServer = "nats://127.0.0.1:4222"

// clientFlags are the connection flags of the commands that are NATS
// clients: the server, and the same kinds of credentials and TLS settings
// as the daemon's nats.auth and nats.tls. Secrets are read from files or
// the environment, never from the command line, where ps would show them.
type clientFlags struct {
	server string
	auth   config.ClientAuth
	tls    config.TLS
}

func addClientFlags(fs *flag.FlagSet) *clientFlags {
	c := &clientFlags{}
	fs.StringVar(&c.server, "server", defaultServer, "NATS server `URL` (tls://host:port for TLS)")
	fs.StringVar(&c.auth.CredentialsFile, "creds", "", "authenticate with a credentials `file` (user JWT and nkey seed, as made by nsc)")
	fs.StringVar(&c.auth.NKeyFile, "nkey", "", "authenticate with the user nkey seed (SU...) in `file`")
	fs.StringVar(&c.auth.User, "user", "", "authenticate as user `name`, with --password-file or --password-env")
	fs.StringVar(&c.auth.PasswordFile, "password-file", "", "read --user's password from `file`")
	fs.StringVar(&c.auth.PasswordEnv, "password-env", "", "read --user's password from the environment `variable`")
	fs.StringVar(&c.auth.TokenFile, "token-file", "", "authenticate with the token in `file`")
	fs.StringVar(&c.auth.TokenEnv, "token-env", "", "authenticate with the token in the environment `variable`")
	fs.StringVar(&c.tls.CAFile, "tls-ca", "", "verify the server's certificate against the CA certificates in `file` (PEM; default: the system's)")
	fs.StringVar(&c.tls.CertFile, "tls-cert", "", "present the client certificate in `file` (PEM, with --tls-key)")
	fs.StringVar(&c.tls.KeyFile, "tls-key", "", "the client certificate's key `file` (PEM)")
	return c
}

// connect connects as the client called name.
func (c *clientFlags) connect(name string) (*nats.Conn, error) {
	opts, err := daemon.ClientOptions(c.auth, c.tls)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	nc, err := nats.Connect(c.server, append(opts, nats.Name(name))...)
	if err != nil {
		return nil, fmt.Errorf("%s: connecting to %s: %w", name, c.server, err)
	}
	return nc, nil
}
