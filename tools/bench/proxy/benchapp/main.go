// Command benchapp is the benchmark's application server: 1 KiB responses over
// HTTP/1.1 keep-alive.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:9000", "listen address")
	size := flag.Int("size", 1024, "response body bytes")
	flag.Parse()
	body := bytes.Repeat([]byte("x"), *size)
	cl := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Length"] = []string{cl}
		w.Header()["Content-Type"] = []string{"text/plain"}
		_, _ = w.Write(body)
	})
	if err := http.ListenAndServe(*addr, h); err != nil {
		fmt.Fprintln(os.Stderr, "benchapp:", err)
		os.Exit(1)
	}
}
