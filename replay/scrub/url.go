package scrub

import (
	"net/url"
	"strings"
)

// credentialParams are substrings of query parameter names whose values
// are credentials (api_key, token, sig, ...); other query values (an
// api-version) are redacted in URLs but not hunted for in free text.
var credentialParams = []string{"key", "token", "secret", "sig", "pass", "auth", "cred", "code", "session"}

// URLSecrets returns a URL's password and credential-like query values.
func URLSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok && p != "" {
		out = append(out, p)
	}
	for k, vs := range u.Query() {
		lk := strings.ToLower(k)
		for _, c := range credentialParams {
			if strings.Contains(lk, c) {
				out = append(out, vs...)
				break
			}
		}
	}
	return out
}

// Redacted stands in for a URL's user info and query values.
const Redacted = "REDACTED"

// URL returns raw with its user info replaced by REDACTED, every query
// value by REDACTED (names are kept) and a fragment by REDACTED. It works on
// the text, so a URL that does not parse is redacted too; anything before
// the last '@' ahead of the query counts as user info.
func URL(raw string) string {
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	end := strings.IndexAny(rest, "?#")
	if end < 0 {
		end = len(rest)
	}
	head, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(head, '@'); at >= 0 {
		head = Redacted + "@" + head[at+1:]
	}
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(head)
	if tail == "" {
		return b.String()
	}
	query, frag, hasFrag := tail, "", false
	if i := strings.IndexByte(tail, '#'); i >= 0 {
		query, frag, hasFrag = tail[:i], tail[i+1:], true
	}
	if strings.HasPrefix(query, "?") {
		b.WriteByte('?')
		for i, p := range strings.Split(query[1:], "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			switch k, _, ok := strings.Cut(p, "="); {
			case ok:
				b.WriteString(k + "=" + Redacted)
			case p != "":
				b.WriteString(Redacted)
			}
		}
	}
	if hasFrag {
		b.WriteByte('#')
		if frag != "" {
			b.WriteString(Redacted)
		}
	}
	return b.String()
}

// URLs redacts (URL) every http:// or https:// URL in text; a
// URL ends at white space, a quote or an angle bracket, and trailing
// punctuation is left outside it.
func URLs(text string) string {
	if !strings.Contains(text, "://") {
		return text
	}
	var out strings.Builder
	last := 0
	for i := 0; i < len(text); {
		k := strings.Index(text[i:], "://")
		if k < 0 {
			break
		}
		at := i + k
		start := at
		for start > 0 && isSchemeByte(text[start-1]) {
			start--
		}
		scheme := strings.ToLower(text[start:at])
		if scheme != "http" && scheme != "https" {
			i = at + 3
			continue
		}
		end := at + 3
		for end < len(text) && !strings.ContainsRune(" \t\r\n\"'<>`", rune(text[end])) {
			end++
		}
		for end > at+3 && strings.ContainsRune(".,;:)]}", rune(text[end-1])) {
			end--
		}
		out.WriteString(text[last:start])
		out.WriteString(URL(text[start:end]))
		last, i = end, end
	}
	if last == 0 {
		return text
	}
	out.WriteString(text[last:])
	return out.String()
}

func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
