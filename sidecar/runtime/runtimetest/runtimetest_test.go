package runtimetest

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAlterOneByte(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, in, want string
		err            bool
	}{
		{"changes one character", `{"resources":[{"Value":"QUFBQUFBQUFB"}]}`, `{"resources":[{"Value":"QUFBAUFBQUFB"}]}`, false},
		{"A becomes B", `{"resources":[{"Value":"QUFBAUFBQUFB"}]}`, `{"resources":[{"Value":"QUFBBUFBQUFB"}]}`, false},
		{"no value", `{"resources":[]}`, "", true},
	}
	for _, tc := range tests {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, []byte(tc.in), 0o600); err != nil {
			t.Fatal(err)
		}
		err := AlterOneByte(path)
		if (err != nil) != tc.err {
			t.Fatalf("%s: err %v", tc.name, err)
		}
		if got, _ := os.ReadFile(path); !tc.err && string(got) != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
