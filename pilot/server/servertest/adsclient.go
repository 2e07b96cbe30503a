package servertest

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	// Register the Envoy types pilot sends so SotW resources decode by name.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// Response is one response an ADS client received, in either protocol.
type Response struct {
	At      time.Time
	TypeURL string
	Nonce   string
	Version string            // SotW version_info, delta system_version_info
	Names   map[string]string // resource name -> per-resource version (delta) or "" (SotW)
	Values  map[string][]byte // resource name -> Any.value
	Removed []string          // delta removed_resources
	Nacked  string            // the error this client answered with; "" = ACK
}

// Judge decides whether a client accepts a response: a non-nil error is sent
// back as a NACK with its text.
type Judge func(Response) error

// Client is a hand-driven ADS client (state of the world or delta) that answers
// every response at once: ACK, or NACK when its Judge says so. It records every
// response for assertions.
type Client struct {
	delta  bool
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	sendMu sync.Mutex // serialises Send
	sotw   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	dstr   discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient

	mu    sync.Mutex // guards resps, err, acked
	resps []Response
	err   error
	acked map[string]string // SotW: type -> last accepted version
	names map[string][]string
}

// ClientOptions configure Dial.
type ClientOptions struct {
	Delta bool
	Node  *corev3.Node
	// Types to subscribe, in order; Names[type] lists explicit names, else the
	// subscription is a wildcard.
	Types []string
	Names map[string][]string
	Judge Judge // nil accepts everything
	// Initial is the delta initial_resource_versions per type (a reconnect).
	Initial map[string]map[string]string
	// Silent records responses and never answers them (a proxy stuck applying).
	Silent bool
	// Creds are the transport's (TLS with a client certificate for pilot's
	// TLS listener); nil is plaintext.
	Creds credentials.TransportCredentials
}

// Dial opens one ADS stream to addr and subscribes; Close is registered with t.Cleanup.
func Dial(t testing.TB, addr string, o ClientOptions) *Client {
	t.Helper()
	creds := o.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{delta: o.Delta, cc: cc, cancel: cancel, done: make(chan struct{}), acked: map[string]string{}, names: o.Names}
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(cc)
	if o.Delta {
		c.dstr, err = ads.DeltaAggregatedResources(ctx)
	} else {
		c.sotw, err = ads.StreamAggregatedResources(ctx)
	}
	if err != nil {
		cancel()
		cc.Close()
		t.Fatal(err)
	}
	for i, typ := range o.Types {
		var n *corev3.Node
		if i == 0 {
			n = o.Node
		}
		if o.Delta {
			err = c.sendDelta(&discoveryv3.DeltaDiscoveryRequest{Node: n, TypeUrl: typ, ResourceNamesSubscribe: o.Names[typ],
				InitialResourceVersions: o.Initial[typ]})
		} else {
			err = c.sendSotW(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: typ, ResourceNames: o.Names[typ]})
		}
		if err != nil {
			t.Fatalf("subscribe %s: %v", typ, err)
		}
	}
	go c.loop(o.Judge, o.Silent)
	t.Cleanup(c.Close)
	return c
}

func (c *Client) sendDelta(r *discoveryv3.DeltaDiscoveryRequest) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.dstr.Send(r)
}

func (c *Client) sendSotW(r *discoveryv3.DiscoveryRequest) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.sotw.Send(r)
}

func (c *Client) loop(judge Judge, silent bool) {
	defer close(c.done)
	for {
		r, err := c.recv()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		var verdict error
		if judge != nil {
			verdict = judge(r)
		}
		var detail *rpcstatus.Status
		if verdict != nil {
			r.Nacked = verdict.Error()
			detail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: verdict.Error()}
		}
		c.mu.Lock()
		c.resps = append(c.resps, r)
		if verdict == nil {
			c.acked[r.TypeURL] = r.Version
		}
		version := c.acked[r.TypeURL]
		c.mu.Unlock()
		if silent {
			continue
		}
		if c.delta {
			err = c.sendDelta(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.TypeURL, ResponseNonce: r.Nonce, ErrorDetail: detail})
		} else {
			err = c.sendSotW(&discoveryv3.DiscoveryRequest{TypeUrl: r.TypeURL, VersionInfo: version, ResponseNonce: r.Nonce,
				ResourceNames: c.names[r.TypeURL], ErrorDetail: detail})
		}
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
	}
}

func (c *Client) recv() (Response, error) {
	now := time.Now
	if c.delta {
		m, err := c.dstr.Recv()
		if err != nil {
			return Response{}, err
		}
		r := Response{At: now(), TypeURL: m.GetTypeUrl(), Nonce: m.GetNonce(), Version: m.GetSystemVersionInfo(),
			Names: map[string]string{}, Values: map[string][]byte{}, Removed: m.GetRemovedResources()}
		for _, res := range m.GetResources() {
			r.Names[res.GetName()] = res.GetVersion()
			r.Values[res.GetName()] = res.GetResource().GetValue()
		}
		return r, nil
	}
	m, err := c.sotw.Recv()
	if err != nil {
		return Response{}, err
	}
	r := Response{At: now(), TypeURL: m.GetTypeUrl(), Nonce: m.GetNonce(), Version: m.GetVersionInfo(), Names: map[string]string{}, Values: map[string][]byte{}}
	for _, a := range m.GetResources() {
		n := resourceName(a.GetTypeUrl(), a.GetValue())
		r.Names[n] = ""
		r.Values[n] = a.GetValue()
	}
	return r, nil
}

// Responses returns a copy of every response received so far.
func (c *Client) Responses() []Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Response(nil), c.resps...)
}

// Err is why the stream ended; nil while it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Conn is the client's gRPC connection (to send other RPCs on the stream's
// transport, as a sidecar sends outlier reports).
func (c *Client) Conn() *grpc.ClientConn { return c.cc }

// Close ends the stream and waits for the client's goroutine.
func (c *Client) Close() {
	c.cancel()
	<-c.done
	c.cc.Close()
}

// IsCanceled reports whether err is the end of a stream this client closed.
func IsCanceled(err error) bool {
	return errors.Is(err, io.EOF) || grpcstatus.Code(err) == codes.Canceled
}

// resourceName reads a SotW resource's name ("" when it cannot be decoded).
func resourceName(typeURL string, value []byte) string {
	m, err := anypb.UnmarshalNew(&anypb.Any{TypeUrl: typeURL, Value: value}, proto.UnmarshalOptions{})
	if err != nil {
		return ""
	}
	switch v := m.(type) {
	case interface{ GetClusterName() string }:
		return v.GetClusterName()
	case interface{ GetName() string }:
		return v.GetName()
	}
	return ""
}
