// Command meshctl is Weft's CLI; everything lives in package meshctl.
package main

import (
	"context"
	"os"

	"github.com/weft-mesh/weft/tools/meshctl"
)

func main() { os.Exit(meshctl.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
