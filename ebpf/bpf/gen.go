// Package bpf holds Weft's eBPF programs (redirect.c: outbound interception by
// cgroup hooks) and their bpf2go output. The output (redirect_bpfel.go and
// redirect_bpfel.o) is committed, so building needs no clang; sum_gen.go
// records what it was built from and bpf_test.go checks that it still matches.
// Regenerate with `make generate` (clang, llvm and libbpf-dev).
package bpf

// Keep the bpf2go line first and unique: internal/srcsum hashes it with the C source.
//go:generate go tool bpf2go -tags linux -target bpfel -type config -type config_flags -type orig_dst -type tuple -type stat Redirect redirect.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
//go:generate go run ./internal/gensum
