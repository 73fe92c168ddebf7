package main

import (
	"fmt"
	"strings"

	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/trace/anon"
)

// Bounds on the small files flags name, read whole through
// regfile.ReadFile as every such file is (the CA certificate, scenario,
// mapping and probe files in their libraries): a named pipe is refused
// without waiting for a writer, a device or any other file that is not
// regular at once, and a file past its bound without being read past it.
const (
	// maxSaltFileBytes: a salt is 16 to 64 bytes, in hex or base64.
	maxSaltFileBytes = 4 << 10
	// maxAPIKeyFileBytes: an API key or a token is at most a few KiB.
	maxAPIKeyFileBytes = 64 << 10
)

// loadSalt reads the salt from file if given, else from $SERVETRACE_SALT,
// else makes a random one (anon.LoadSalt).
func loadSalt(file string) (anon.Salt, error) {
	if file == "" {
		return anon.LoadSalt()
	}
	b, err := regfile.ReadFile(file, maxSaltFileBytes)
	if err != nil {
		return anon.Salt{}, err
	}
	s, err := anon.ParseSalt(strings.TrimSpace(string(b)))
	if err != nil {
		return anon.Salt{}, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}
