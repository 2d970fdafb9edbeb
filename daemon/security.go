package daemon

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/smtd/smtd/config"
)

// ErrCredentials means the credentials or TLS settings of a NATS client
// are inconsistent or cannot be read.
var ErrCredentials = errors.New("smtd: NATS credentials")

// daemonInbox is the prefix of the daemon's own reply subjects when the
// embedded server has users. The other roles may only subscribe to
// _INBOX.>, so the JetStream API replies and the checkpoint objects the
// daemon fetches through its inbox are not theirs to read.
const daemonInbox = "_SMTD_INBOX"

// secureEmbedded adds to opts the users of cfg.NATS with the permissions
// of their roles, the daemon's own identity with full rights, and TLS.
// It returns the options the daemon connects with: its nkey and private
// inbox prefix when there are users, nothing otherwise. The daemon's key
// pair is made fresh at every start and never leaves the process.
func secureEmbedded(cfg *config.Config, opts *server.Options) ([]nats.Option, error) {
	if t := cfg.NATS.TLS; t.Enabled() {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile, Verify: t.CAFile != "",
		})
		if err != nil {
			return nil, fmt.Errorf("smtd: embedded NATS server TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify, opts.TLSTimeout = tc, true, t.CAFile != "", 2
	}
	if len(cfg.NATS.Users) == 0 {
		return nil, nil
	}
	for i, u := range cfg.NATS.Users {
		perms := rolePermissions(cfg, u.Role)
		if u.NKey != "" {
			opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: perms})
			continue
		}
		pw, err := config.ReadSecret(u.PasswordFile, u.PasswordEnv)
		if err != nil {
			return nil, fmt.Errorf("smtd: nats.users[%d] (%s): %w", i, u.User, err)
		}
		opts.Users = append(opts.Users, &server.User{Username: u.User, Password: pw, Permissions: perms})
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("smtd: the daemon's nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("smtd: the daemon's nkey: %w", err)
	}
	opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub}) // nil permissions: everything
	return []nats.Option{
		nats.Nkey(pub, kp.Sign),
		nats.CustomInboxPrefix(daemonInbox),
	}, nil
}

// rolePermissions returns the subjects a role may use on the embedded
// server; anything not allowed is denied. With prefix P:
//
//	producer  publish   every pipeline's input subject, P.pipelines
//	          subscribe _INBOX.> (JetStream publish acknowledgements,
//	                    replies)
//	consumer  publish   P.embed.*, P.neighbours.* (queries), P.pipelines
//	          subscribe every output subject O and O.>, P.events.>, _INBOX.>
//	operator  what a consumer may, and
//	          publish   P.control.>, P.status, $SRV.> (micro discovery),
//	                    $JS.API.INFO and the stream and consumer
//	                    INFO, NAMES and LIST requests (read-only)
//
// Only the daemon may create, change or delete streams and consumers, or
// read and write the object store and key-value buckets of checkpoints.
// Input subjects may be wildcards, even ">": the producer's deny list
// keeps such a pattern from reaching the daemon's (worker mode's
// P.work.> among them), JetStream's, the checkpoint buckets' and the
// output subjects.
func rolePermissions(cfg *config.Config, role string) *server.Permissions {
	prefix := cfg.Service.Prefix
	var inputs, outputs []string
	for _, p := range cfg.Pipelines {
		inputs = append(inputs, p.Input.Subject)
		outputs = append(outputs, p.Output.Subject, p.Output.Subject+".>")
	}
	// P.pipelines tells every role the pipelines' subjects and shapes,
	// what smtd feed, smtd tail and package client look up first.
	queries := []string{cfg.Subject("embed.*"), cfg.Subject("neighbours.*"), cfg.Subject("pipelines")}
	reading := append(append([]string{}, outputs...), cfg.Subject("events.>"), nats.InboxPrefix+">")
	switch role {
	case config.RoleProducer:
		deny := []string{"$JS.>", "$KV.>", "$O.>", "$SRV.>", "$SYS.>", "_INBOX.>", daemonInbox + ".>", prefix + ".control.>",
			prefix + ".status", prefix + ".events.>", prefix + ".embed.>", prefix + ".neighbours.>", prefix + ".work.>"}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: append(inputs, cfg.Subject("pipelines")), Deny: append(deny, outputs...)},
			Subscribe: &server.SubjectPermission{Allow: []string{nats.InboxPrefix + ">"}},
		}
	case config.RoleConsumer:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: queries},
			Subscribe: &server.SubjectPermission{Allow: reading},
		}
	case config.RoleOperator:
		pub := append(queries, cfg.Subject("control.>"), cfg.Subject("status"), "$SRV.>",
			"$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.API.STREAM.INFO.*",
			"$JS.API.CONSUMER.NAMES.*", "$JS.API.CONSUMER.LIST.*", "$JS.API.CONSUMER.INFO.*.*")
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: pub},
			Subscribe: &server.SubjectPermission{Allow: reading},
		}
	}
	// Validation admits no other role; deny everything all the same.
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Deny: []string{">"}},
		Subscribe: &server.SubjectPermission{Deny: []string{">"}},
	}
}

// ClientOptions returns the nats.go options that authenticate a client
// with auth and secure its connection with tls, as the daemon does with an
// external server and the command-line clients do with their flags: a
// credentials file, an nkey seed file, a user with a password or a token
// (at most one; secrets read from files or the environment), a CA to
// verify the server and a client certificate.
func ClientOptions(auth config.ClientAuth, tls config.TLS) ([]nats.Option, error) {
	var opts []nats.Option
	var methods int
	if auth.CredentialsFile != "" {
		methods++
		opts = append(opts, nats.UserCredentials(auth.CredentialsFile))
	}
	if auth.NKeyFile != "" {
		methods++
		o, err := nats.NkeyOptionFromSeed(auth.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey seed %s: %w", ErrCredentials, auth.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	switch {
	case auth.User != "":
		methods++
		pw, err := config.ReadSecret(auth.PasswordFile, auth.PasswordEnv)
		if err != nil {
			return nil, fmt.Errorf("%w: password of %s: %w", ErrCredentials, auth.User, err)
		}
		opts = append(opts, nats.UserInfo(auth.User, pw))
	case auth.PasswordFile != "" || auth.PasswordEnv != "":
		return nil, fmt.Errorf("%w: a password needs a user", ErrCredentials)
	}
	if auth.TokenFile != "" || auth.TokenEnv != "" {
		methods++
		tok, err := config.ReadSecret(auth.TokenFile, auth.TokenEnv)
		if err != nil {
			return nil, fmt.Errorf("%w: token: %w", ErrCredentials, err)
		}
		opts = append(opts, nats.Token(tok))
	}
	if methods > 1 {
		return nil, fmt.Errorf("%w: give one way to authenticate (credentials, nkey, user or token), got %d", ErrCredentials, methods)
	}
	if tls.CAFile != "" {
		opts = append(opts, nats.RootCAs(tls.CAFile))
	}
	switch {
	case tls.CertFile != "" && tls.KeyFile != "":
		opts = append(opts, nats.ClientCert(tls.CertFile, tls.KeyFile))
	case tls.CertFile != "" || tls.KeyFile != "":
		return nil, fmt.Errorf("%w: a client certificate needs both a certificate and a key file", ErrCredentials)
	}
	return opts, nil
}
