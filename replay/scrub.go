package replay

import (
	"bytes"
	"strings"
)

// Servers put surprising things in error messages: a validation error can
// echo the whole request body (FastAPI's 422 lists each invalid field with
// its "input"), and a gateway can quote the key it refused. An error message
// is recorded in results.parquet, so before it is, scrubError removes every
// run of it copied from the request body or from a secret.

const (
	// minCopiedText is the shortest run of an error message, copied from
	// the request body, that is removed: long enough that field names and
	// numbers are kept, short enough that no sentence of a prompt survives.
	minCopiedText = 16
	// minCopiedSecret is the shortest run copied from an API key or header
	// value that is removed (a gateway may quote part of a key).
	minCopiedSecret = 6
)

// scrubError returns msg with every run of at least minCopiedSecret bytes
// copied from a secret replaced by "<redacted>", and every run of at least
// minCopiedText bytes copied from body by "<request text>". Secrets shorter
// than minCopiedSecret are no credentials and could not be told from words
// ("tok" in "max_tokens"), so they are left alone.
func scrubError(msg string, body []byte, secrets []string) string {
	for _, s := range secrets {
		msg = redactCopies(msg, []byte(s), minCopiedSecret, "<redacted>")
	}
	return redactCopies(msg, body, minCopiedText, "<request text>")
}

// redactCopies replaces each maximal run of msg of at least minRun bytes
// that occurs in src with label. It is quadratic in the message's length
// times a search of src, which error messages (shortened to 200 bytes)
// keep cheap.
func redactCopies(msg string, src []byte, minRun int, label string) string {
	if len(src) < minRun || len(msg) < minRun {
		return msg
	}
	var out strings.Builder
	i := 0
	for i < len(msg) {
		if i+minRun > len(msg) || !bytes.Contains(src, []byte(msg[i:i+minRun])) {
			out.WriteByte(msg[i])
			i++
			continue
		}
		j := i + minRun
		for j < len(msg) && bytes.Contains(src, []byte(msg[i:j+1])) {
			j++
		}
		out.WriteString(label)
		i = j
	}
	return strings.ToValidUTF8(out.String(), "")
}

// secrets lists what a run must never write: the API key and the values of
// the extra headers.
func (o *Options) secrets() []string {
	s := make([]string, 0, 1+len(o.Headers))
	if o.APIKey != "" {
		s = append(s, o.APIKey)
	}
	for _, v := range o.Headers {
		s = append(s, v)
	}
	return s
}
