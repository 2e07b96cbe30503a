//go:build !weftpprof

package admin

import "net/http"

const pprofBuilt = false

func pprofRoutes(*http.ServeMux) {}
