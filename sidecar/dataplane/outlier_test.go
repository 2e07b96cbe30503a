package dataplane_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weft-mesh/weft/sidecar/cluster"
	"github.com/weft-mesh/weft/sidecar/dataplane"
	"github.com/weft-mesh/weft/sidecar/xdsresource"
)

// fullOutlier sets every field to a distinct non-zero value.
func fullOutlier() *xdsresource.Outlier {
	return &xdsresource.Outlier{
		Consecutive5xx: 1, ConsecutiveGatewayFailure: 2, ConsecutiveLocalOriginFailure: 3,
		EnforcingConsecutive5xx: 4, EnforcingConsecutiveGatewayFailure: 5, EnforcingConsecutiveLocalOriginFailure: 6,
		SplitExternalLocalOriginErrors: true,
		SuccessRate:                    &xdsresource.SuccessRate{MinimumHosts: 7, RequestVolume: 8, StdevFactor: 1.9, Enforcing: 9, EnforcingLocalOrigin: 10},
		FailurePercentage:              &xdsresource.FailurePercentage{Threshold: 11, MinimumHosts: 12, RequestVolume: 13, Enforcing: 14, EnforcingLocalOrigin: 15},
		Interval:                       time.Second, BaseEjectionTime: 2 * time.Second, MaxEjectionTime: 3 * time.Second,
		MaxEjectionTimeJitter: 4 * time.Second, MaxEjectionPercent: 16,
	}
}

// sameFields reports a field of the decoded type that the detector's Config lacks
// or holds differently: the copy is field by field, and a field added to one side
// and not the other fails here.
func sameFields(t *testing.T, path string, from, to reflect.Value) {
	t.Helper()
	if from.Kind() == reflect.Pointer {
		if from.IsNil() != to.IsNil() {
			t.Fatalf("%s: nil %v vs %v", path, from.IsNil(), to.IsNil())
		}
		if from.IsNil() {
			return
		}
		from, to = from.Elem(), to.Elem()
	}
	if from.Kind() != reflect.Struct {
		if from.Interface() != to.Interface() {
			t.Fatalf("%s: %v copied as %v", path, from.Interface(), to.Interface())
		}
		return
	}
	if from.NumField() != to.NumField() {
		t.Fatalf("%s: %d fields decoded, %d in the detector's config", path, from.NumField(), to.NumField())
	}
	for i := range from.NumField() {
		name := from.Type().Field(i).Name
		f := to.FieldByName(name)
		if !f.IsValid() {
			t.Fatalf("%s.%s: missing from the detector's config", path, name)
		}
		sameFields(t, path+"."+name, from.Field(i), f)
	}
}

// TestOutlierConfigured: at activation the service key's detector gets the
// cluster's outlier detection, field by field, and the endpoints as members;
// subset clusters share it.
func TestOutlierConfigured(t *testing.T) {
	reg := cluster.NewRegistry()
	st := clusterState(lim, map[string][]string{v1: {"10.0.0.1:9080", "10.0.0.2:9080"}, v2: {"10.0.0.3:9080"}})
	for _, name := range []string{v1, v2} {
		st[xdsresource.ClusterType][name].(*xdsresource.Cluster).Outlier = fullOutlier()
		st[xdsresource.ClusterType][name].(*xdsresource.Cluster).PanicThreshold = 30
	}
	cfg := compileWith(t, reg, st)
	d := cfg.Cluster(v1).Shared.Outlier
	if d != cfg.Cluster(v2).Shared.Outlier {
		t.Fatal("subset clusters have different detectors")
	}
	if d.Config() != nil {
		t.Fatal("configured before activation")
	}
	cfg.Activate()
	sameFields(t, "Outlier", reflect.ValueOf(fullOutlier()), reflect.ValueOf(d.Config()))
	if d.Len() != 3 {
		t.Fatalf("%d members, want the 3 endpoints", d.Len())
	}
	if got := cfg.Cluster(v1).PanicThreshold(); got != 30 {
		t.Fatalf("panic threshold %v", got)
	}
	// Dropped from the policy: detection off at the next activation.
	for _, name := range []string{v1, v2} {
		st[xdsresource.ClusterType][name].(*xdsresource.Cluster).Outlier = nil
	}
	compileWith(t, reg, st).Activate()
	if d.Config() != nil {
		t.Fatal("still configured")
	}
}

// TestOutlierSubsetsMustAgree: one detector per service key, so differing outlier
// detection among its clusters is refused, naming both; a bad value is refused
// naming the field, and nothing is applied.
func TestOutlierSubsetsMustAgree(t *testing.T) {
	reg := cluster.NewRegistry()
	st := clusterState(lim, map[string][]string{v1: {"10.0.0.1:9080"}, v2: {"10.0.0.3:9080"}})
	st[xdsresource.ClusterType][v1].(*xdsresource.Cluster).Outlier = fullOutlier()
	_, err := dataplane.CompileWith(st, dataplane.Options{Registry: reg})
	if err == nil || !strings.Contains(err.Error(), "outlier_detection differs from cluster") || !strings.Contains(err.Error(), v1) {
		t.Fatalf("error %v", err)
	}
	bad := fullOutlier()
	bad.MaxEjectionTime = time.Second // below base
	st[xdsresource.ClusterType][v1].(*xdsresource.Cluster).Outlier = bad
	st[xdsresource.ClusterType][v2].(*xdsresource.Cluster).Outlier = bad
	_, err = dataplane.CompileWith(st, dataplane.Options{Registry: reg})
	if err == nil || !strings.Contains(err.Error(), "maxEjectionTime") {
		t.Fatalf("error %v", err)
	}
	if d := reg.Shared(cluster.ServiceKey(v1)).Outlier; d.Config() != nil {
		t.Fatal("a refused candidate configured the detector")
	}
}
