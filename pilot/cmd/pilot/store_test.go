package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestStoreFlags: the store flags pick bolt or etcd, and every inconsistent
// combination is refused with a message naming the flag.
func TestStoreFlags(t *testing.T) {
	tests := []struct {
		args     []string
		wantEtcd bool
		wantErr  string
	}{
		{nil, false, ""},
		{[]string{"--store", "bolt"}, false, ""},
		{[]string{"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379,http://127.0.0.2:2379"}, true, ""},
		{[]string{"--store", "etcd"}, false, "--store etcd needs --etcd-endpoints"},
		{[]string{"--etcd-endpoints", "http://127.0.0.1:2379"}, false, "--etcd-endpoints given with --store bolt"},
		{[]string{"--store", "consul"}, false, `--store "consul" is not bolt or etcd`},
		{[]string{"--store", "etcd", "--etcd-endpoints", "http://a:2379,,http://b:2379"}, false, "has an empty endpoint"},
		{[]string{"--store", "etcd", "--etcd-endpoints", "https://a:2379", "--etcd-cert", "c.pem"}, false, "certificate and key must be given together"},
		{[]string{"--store", "etcd", "--etcd-endpoints", "https://a:2379", "--etcd-ca", "/nonexistent/ca.pem"}, false, "etcd CA: open /nonexistent/ca.pem"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("pilot", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f storeFlags
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			open, err := f.open(fs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (open != nil) != tc.wantEtcd {
				t.Fatalf("etcd opener %v, want %v", open != nil, tc.wantEtcd)
			}
		})
	}
}
