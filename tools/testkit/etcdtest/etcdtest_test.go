package etcdtest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(Cleanup)) }

// TestClusterKillLeader: a 3-member cluster of each flavour serves writes, elects
// a new leader when the leader is SIGKILLed, and takes the member back.
func TestClusterKillLeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		bin  func(t *testing.T) string
	}{
		{"etcd3.4", func(t *testing.T) string { return RequireBinary(t, Etcd34Binary) }},
		{"etcd3.7", func(t *testing.T) string { return Etcd37Binary(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Start(t, Options{Binary: tc.bin(t)})
			cli := c.Client(t)
			put := func(v string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := cli.Put(ctx, "k", v); err != nil {
					t.Fatalf("put %s: %v", v, err)
				}
			}
			put("1")
			old := c.WaitLeader(t)
			old.Kill(t)
			if lead := c.WaitLeader(t); lead == old {
				t.Fatalf("leader still %s after it was killed", old.Name)
			}
			put("2")
			c.Restart(t, old)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := cli.Get(ctx, "k")
			if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
				t.Fatalf("get k: %v %v, want 2", resp, err)
			}
		})
	}
}
