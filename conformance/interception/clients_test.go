package interception

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// clientEnv makes the test binary one of the unmodified clients (run in a pod by
// the tests; see client): it names the kind, the arguments are the target.
const clientEnv = "WEFT_INTERCEPTION_CLIENT"

// clientTimeout bounds one client run (each request inside it has its own).
const clientTimeout = 10 * time.Second

// client is the test binary as a client process: it prints one line (what it
// got) and exits 0, or prints the error on stderr and exits 1. None of them
// knows about the mesh: plain names and ports, the system resolver.
func client(kind string, args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "client %s: want one target, got %q\n", kind, args)
		return 2
	}
	out, err := runClient(kind, args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "client %s %s: %v\n", kind, args[0], err)
		return 1
	}
	fmt.Println(out)
	return 0
}

func runClient(kind, target string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	switch kind {
	case "http": // a Go net/http client: GET target (a URL)
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b), err
	case "grpc": // a gRPC client: health Check of target (host:port), resolved by grpc's dns resolver
		cc, err := grpc.NewClient("dns:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return "", err
		}
		defer cc.Close()
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "reviews"})
		if err != nil {
			return "", err
		}
		return r.GetStatus().String(), nil
	case "tcp", "tcp4", "tcp6": // a raw TCP client: a line out, everything back
		var d net.Dialer
		network := kind
		c, err := d.DialContext(ctx, network, target)
		if err != nil {
			return "", err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return "", err
		}
		l, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(l), err
	case "lookup": // the system resolver alone
		addrs, err := net.DefaultResolver.LookupHost(ctx, target)
		return strings.Join(addrs, ","), err
	}
	return "", fmt.Errorf("no client %q", kind)
}
