package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Users, TLS and credentials are validated with the line and field of
// each problem; secrets must come from files or the environment.
func TestSecurityValidation(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "cam1.pw")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pw")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	t.Setenv("SMTD_TEST_PW", "secret")
	const nkey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	for _, tc := range []struct {
		name, yaml string
		wantErr    []string
	}{
		{name: "users on every interface", yaml: fmt.Sprintf(`
nats:
  listen: 0.0.0.0:4222
  users:
    - {user: cam1, password_file: %s, role: producer}
    - {user: ops, password_env: SMTD_TEST_PW, role: operator}
    - {nkey: %s, role: consumer}`, pw, nkey)},
		{name: "loopback without users", yaml: "nats: {listen: '[::1]:4222'}"},
		{name: "localhost without users", yaml: "nats: {listen: 'localhost:4222'}"},
		{name: "every interface without users", yaml: "nats: {listen: ':4222'}", wantErr: []string{`x.yaml:1: nats.listen: ":4222" is beyond the loopback interface`}},
		{name: "a host name without users", yaml: "nats: {listen: 'smtd.example:4222'}", wantErr: []string{"nats.allow_unauthenticated: true"}},
		{name: "opt-in with users", yaml: fmt.Sprintf("nats:\n  allow_unauthenticated: true\n  users: [{nkey: %s, role: consumer}]", nkey),
			wantErr: []string{"x.yaml:2: nats.allow_unauthenticated: must be false with nats.users"}},
		{name: "inline password", yaml: "nats:\n  users: [{user: a, password: b, role: producer}]", wantErr: []string{"x.yaml:2: nats.users[0].password: unknown field"}},
		{name: "no password", yaml: "nats:\n  users:\n    - {user: a, role: producer}", wantErr: []string{"x.yaml:3: nats.users[0]: needs password_file or password_env"}},
		{name: "two passwords", yaml: fmt.Sprintf("nats:\n  users: [{user: a, password_file: %s, password_env: SMTD_TEST_PW, role: producer}]", pw), wantErr: []string{"give password_file or password_env, not both"}},
		{name: "empty password file", yaml: fmt.Sprintf("nats:\n  users:\n    - user: a\n      password_file: %s\n      role: producer", empty), wantErr: []string{"x.yaml:4: nats.users[0].password_file: " + empty + " is empty"}},
		{name: "unset password env", yaml: "nats:\n  users: [{user: a, password_env: SMTD_TEST_UNSET, role: producer}]", wantErr: []string{"nats.users[0].password_env: environment variable SMTD_TEST_UNSET is unset or empty"}},
		{name: "bad role", yaml: fmt.Sprintf("nats:\n  users:\n    - {nkey: %s, role: admin}", nkey), wantErr: []string{"x.yaml:3: nats.users[0].role: must be producer, consumer or operator"}},
		{name: "bad nkey", yaml: "nats:\n  users: [{nkey: SUABC, role: consumer}]", wantErr: []string{"nats.users[0].nkey: must be a public user nkey"}},
		{name: "duplicate user", yaml: fmt.Sprintf("nats:\n  users: [{nkey: %s, role: consumer}, {nkey: %s, role: operator}]", nkey, nkey), wantErr: []string{"nats.users[1]: duplicate user"}},
		{name: "user and nkey", yaml: fmt.Sprintf("nats:\n  users: [{user: a, nkey: %s, role: consumer}]", nkey), wantErr: []string{"nats.users[0]: give user or nkey, not both"}},
		{name: "half a certificate", yaml: fmt.Sprintf("nats:\n  tls: {cert_file: %s}", pw), wantErr: []string{"nats.tls: the embedded server needs both cert_file and key_file"}},
		{name: "missing certificate", yaml: fmt.Sprintf("nats:\n  tls: {cert_file: %s, key_file: %s}", missing, pw), wantErr: []string{"nats.tls.cert_file: open " + missing}},
		{name: "auth for the embedded server", yaml: "nats:\n  auth: {user: a, password_env: SMTD_TEST_PW}", wantErr: []string{"nats.auth: is for an external server"}},
		{name: "external with password", yaml: "nats:\n  url: nats://h:4222\n  auth: {user: smtd, password_env: SMTD_TEST_PW}\n  tls: {ca_file: " + pw + "}"},
		{name: "external with two ways", yaml: fmt.Sprintf("nats:\n  url: nats://h:4222\n  auth: {nkey_file: %s, token_env: SMTD_TEST_PW}", pw), wantErr: []string{"nats.auth: give one way to authenticate, got nkey_file and token"}},
		{name: "external password without user", yaml: "nats:\n  url: nats://h:4222\n  auth: {password_env: SMTD_TEST_PW}", wantErr: []string{"nats.auth: a password needs a user"}},
		{name: "external inline token", yaml: "nats:\n  url: nats://h:4222\n  auth: {token: abc}", wantErr: []string{"nats.auth.token: unknown field"}},
		{name: "page on loopback without users", yaml: "observe: {http: '127.0.0.1:9090'}"},
		{name: "page on every interface without users", yaml: "observe: {http: ':9090'}", wantErr: []string{`x.yaml:1: observe.http: ":9090" is beyond the loopback interface and nats.users has no password user`}},
		{name: "page with only nkey users", yaml: fmt.Sprintf("nats:\n  users: [{nkey: %s, role: operator}]\nobserve: {http: '0.0.0.0:9090'}", nkey), wantErr: []string{"observe.allow_unauthenticated: true"}},
		{name: "page with client certificates", yaml: fmt.Sprintf("observe: {http: '0.0.0.0:9090', tls: {cert_file: %s, key_file: %s, ca_file: %s}}", pw, pw, pw)},
		{name: "page opt-in without users", yaml: "observe: {http: '0.0.0.0:9090', allow_unauthenticated: true}"},
		{name: "page with password users", yaml: "nats:\n  users: [{user: ops, password_env: SMTD_TEST_PW, role: operator}]\nobserve: {http: '0.0.0.0:9090'}"},
		{name: "page opt-in with password users", yaml: "nats:\n  users: [{user: ops, password_env: SMTD_TEST_PW, role: operator}]\nobserve: {http: '0.0.0.0:9090', allow_unauthenticated: true}",
			wantErr: []string{"x.yaml:3: observe.allow_unauthenticated: must be false with password users in nats.users"}},
		{name: "page with half a certificate", yaml: fmt.Sprintf("observe: {http: '127.0.0.1:0', tls: {key_file: %s}}", pw), wantErr: []string{"observe.tls: HTTPS needs both cert_file and key_file"}},
		{name: "page with a missing certificate", yaml: fmt.Sprintf("observe: {http: '127.0.0.1:0', tls: {cert_file: %s, key_file: %s}}", missing, pw), wantErr: []string{"observe.tls.cert_file: open " + missing}},
		{name: "external users", yaml: fmt.Sprintf("nats:\n  url: nats://h:4222\n  users: [{nkey: %s, role: consumer}]", nkey), wantErr: []string{"nats.users: apply to the embedded server only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A pipeline of its own: the file is about nats only.
			data := tc.yaml + "\npipelines: [{name: a, input: {subject: a.b}}]\n"
			_, err := Parse([]byte(data), "x.yaml")
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T), want config.Errors", err, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestSecurityUsersCannotChangeLive(t *testing.T) {
	old, new := Default(), Default()
	new.NATS.Users = []User{{NKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", Role: RoleConsumer}}
	if live, refused := LiveChanges(old, new); len(live) != 0 || !reflect.DeepEqual(refused, []string{"nats.users"}) {
		t.Errorf("adding a user: live %v, refused %v; want nats.users refused", live, refused)
	}
	old.NATS.Users = []User{{NKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", Role: RoleConsumer}}
	new.NATS.Users[0].Role = RoleOperator
	if _, refused := LiveChanges(old, new); !reflect.DeepEqual(refused, []string{"nats.users[0].role"}) {
		t.Errorf("changing a role: refused %v, want nats.users[0].role", refused)
	}
}

func TestSecurityReadSecret(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(f, []byte("s3cret \r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SMTD_TEST_SECRET", "from-env")
	if s, err := ReadSecret(f, ""); err != nil || s != "s3cret" {
		t.Errorf("file: %q, %v; want s3cret", s, err)
	}
	if s, err := ReadSecret("", "SMTD_TEST_SECRET"); err != nil || s != "from-env" {
		t.Errorf("env: %q, %v; want from-env", s, err)
	}
	for _, args := range [][2]string{{f, "SMTD_TEST_SECRET"}, {"", ""}, {"", "SMTD_TEST_UNSET"}, {f + ".missing", ""}} {
		if _, err := ReadSecret(args[0], args[1]); !errors.Is(err, ErrSecret) {
			t.Errorf("ReadSecret(%q, %q) = %v, want ErrSecret", args[0], args[1], err)
		}
	}
}
