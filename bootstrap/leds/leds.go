// Package leds names the resources of Weft's incremental endpoints, shared by
// pilot (which generates them) and the sidecar (which merges them): Envoy's
// LEDS shape, served only to nodes that advertise node.FeatureLEDS.
//
// A ClusterLoadAssignment's locality carries, instead of its lb_endpoints, a
// leds_cluster_locality_config naming a collection
//
//	xdstp://<authority>/envoy.config.endpoint.v3.LbEndpoint/<cluster>/<locality>/*
//
// and each endpoint is one resource of TypeURL named inside it:
// <collection without the "*"><address:port>. An endpoint belongs to the
// collection its name ends in: everything up to its last '/', plus "*", so
// nested prefixes cannot claim each other's endpoints.
package leds

import (
	"fmt"
	"strings"
)

// TypeURL is the type of one endpoint resource.
const TypeURL = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"

// Authority is the xdstp authority pilot names its collections with.
const Authority = "weft"

// resourceType is the xdstp resource type segment of every collection.
const resourceType = "envoy.config.endpoint.v3.LbEndpoint"

const scheme = "xdstp://"

// Collection is the collection name of one locality of cluster: the cluster
// and locality segments escaped so neither can hold a '/'.
func Collection(cluster, region, zone, subZone string) string {
	var b strings.Builder
	b.WriteString(CollectionPrefix(cluster))
	escape(&b, region)
	b.WriteByte(',')
	escape(&b, zone)
	b.WriteByte(',')
	escape(&b, subZone)
	b.WriteString("/*")
	return b.String()
}

// CollectionPrefix is what every collection of cluster, and so every name of
// its endpoints, starts with.
func CollectionPrefix(cluster string) string {
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString(Authority)
	b.WriteByte('/')
	b.WriteString(resourceType)
	b.WriteByte('/')
	escape(&b, cluster)
	b.WriteByte('/')
	return b.String()
}

// Endpoint names one endpoint (its address:port, as netip.AddrPort prints it)
// in collection.
func Endpoint(collection, hostPort string) string {
	return strings.TrimSuffix(collection, "*") + hostPort
}

// escape writes s with '%', '/' and ',' percent-encoded.
func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '/', ',':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

// CheckCollection reports whether name is a collection in the xdstp form:
// "xdstp://", a non-empty authority, "/envoy.config.endpoint.v3.LbEndpoint/",
// a non-empty id and "/*".
func CheckCollection(name string) error {
	rest, ok := strings.CutPrefix(name, scheme)
	if !ok {
		return fmt.Errorf("collection %q: want xdstp://<authority>/%s/<id>/*", name, resourceType)
	}
	auth, rest, ok := strings.Cut(rest, "/")
	if !ok || auth == "" {
		return fmt.Errorf("collection %q: no authority", name)
	}
	id, ok := strings.CutPrefix(rest, resourceType+"/")
	if !ok {
		return fmt.Errorf("collection %q: resource type is not %s", name, resourceType)
	}
	id, ok = strings.CutSuffix(id, "/*")
	if !ok || id == "" {
		return fmt.Errorf("collection %q: want an id and a trailing /*", name)
	}
	return nil
}

// CollectionOf is the collection an endpoint name belongs to (everything up to
// its last '/', plus "*"); false when the name has no '/' or ends in one.
func CollectionOf(endpoint string) (string, bool) {
	i := strings.LastIndexByte(endpoint, '/')
	if i < 0 || i == len(endpoint)-1 {
		return "", false
	}
	return endpoint[:i+1] + "*", true
}
