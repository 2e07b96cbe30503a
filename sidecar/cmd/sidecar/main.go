// Command sidecar is Weft's data-plane proxy. Placeholder until the sidecar lands.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "sidecar: not implemented yet")
	os.Exit(2)
}
