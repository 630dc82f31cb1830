package permission

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "read", want: "read"},
		{in: "write", want: "write"},
		{in: "delete", want: "delete"},
		{in: "network", want: "network"},
		{in: "shell", want: "shell"},
		{in: "filesystem", want: "filesystem"},
		{in: "custom:db.query", want: "custom:db.query"},
		{in: "custom:a:b-c_d", want: "custom:a:b-c_d"},
		{in: "", wantErr: "invalid permission"},
		{in: "Read", wantErr: "invalid permission"},
		{in: "root", wantErr: "invalid permission"},
		{in: "custom:", wantErr: "needs a name"},
		{in: "custom: x", wantErr: "only letters"},
		{in: "custom:\x1b[31m", wantErr: "only letters"},
		{in: "custom:" + strings.Repeat("x", 65), wantErr: "longer than 64"},
	} {
		p, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) = %v, %v; want error containing %q", tc.in, p, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, p, err, tc.want)
		}
	}
}

func TestCustom(t *testing.T) {
	p, err := Custom("billing")
	if err != nil || p.String() != "custom:billing" || !p.IsCustom() {
		t.Fatalf("Custom = %v, %v", p, err)
	}
	if _, err := Custom(""); err == nil {
		t.Fatal("Custom(\"\") succeeded")
	}
	if Read.IsCustom() || Read.IsZero() || !(Permission{}).IsZero() {
		t.Fatal("IsCustom/IsZero wrong")
	}
}

func TestTextMarshalling(t *testing.T) {
	type doc struct {
		Perms []Permission `json:"perms" toml:"perms"`
	}
	in := doc{Perms: []Permission{Read, Network, MustParse("custom:x")}}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"perms":["read","network","custom:x"]}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil || len(out.Perms) != 3 || out.Perms[2] != MustParse("custom:x") {
		t.Fatalf("json round trip = %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"perms":["sudo"]}`), &out); err == nil || !errors.Is(err, ErrInvalid) {
		t.Fatalf("json unknown permission: %v", err)
	}
	var td doc
	if _, err := toml.Decode(`perms = ["write", "custom:y"]`, &td); err != nil || td.Perms[0] != Write || td.Perms[1].String() != "custom:y" {
		t.Fatalf("toml decode = %v, %v", td, err)
	}
	if _, err := toml.Decode(`perms = ["nope"]`, &td); err == nil {
		t.Fatal("toml accepted an unknown permission")
	}
	if _, err := json.Marshal(doc{Perms: []Permission{{}}}); err == nil {
		t.Fatal("marshalling the zero Permission succeeded")
	}
}

func TestParseList(t *testing.T) {
	ps, err := ParseList([]string{"read", "custom:q"})
	if err != nil || len(ps) != 2 || Strings(ps)[1] != "custom:q" {
		t.Fatalf("ParseList = %v, %v", ps, err)
	}
	if _, err := ParseList([]string{"read", "bogus"}); err == nil {
		t.Fatal("ParseList accepted bogus")
	}
}
