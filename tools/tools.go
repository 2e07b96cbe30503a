//go:build tools

package tools
import (
 _ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
 _ "github.com/envoyproxy/go-control-plane/pkg/server/v3"
 _ "google.golang.org/grpc"
 _ "go.etcd.io/bbolt"
 _ "github.com/hashicorp/go-hclog"
 _ "go.uber.org/goleak"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "sigs.k8s.io/yaml"
 _ "github.com/google/go-cmp/cmp"
 _ "golang.org/x/net/http2"
)
