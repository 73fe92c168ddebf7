// Package media holds the media quantities servetrace records and replays
// for multimodal requests: the size of an image or audio clip carried in a
// data URI, the tokens a model charges for it, and deterministic synthetic
// images and audio of a given size. The converter, the replay client and the
// simulator share it so that all three count the same way; it imports no
// servetrace package.
package media

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// dataPrefix is the RFC 2397 scheme; schemes are case-insensitive (RFC 3986
// 3.1), so it is matched without regard to case.
const dataPrefix = "data:"

// IsDataURI reports whether s uses the data: scheme. It looks only at the
// prefix, so a caller can tell an inline payload from a URL cheaply;
// ParseDataURI says whether the rest is well formed.
func IsDataURI(s string) bool {
	return len(s) >= len(dataPrefix) && strings.EqualFold(s[:len(dataPrefix)], dataPrefix)
}

// DataURI returns data as an RFC 2397 data URI in standard, padded base64,
// the form clients send inline images and audio in.
func DataURI(mediaType string, data []byte) string {
	return dataPrefix + mediaType + ";base64," + base64.StdEncoding.EncodeToString(data)
}

// ParseDataURI decodes an RFC 2397 data URI, data:[<mediatype>][;base64],<data>.
// The media type comes back as its lowercased type/subtype without
// parameters, "text/plain" where it is empty, as RFC 2397 defaults it.
// Base64 data may use the standard or URL alphabet, with or without padding,
// and may contain whitespace (line-wrapped encoders) or percent escapes;
// other data is percent-decoded. Errors say what is malformed and where,
// never quote the payload, which may be large or private.
func ParseDataURI(s string) (mediaType string, data []byte, err error) {
	if !IsDataURI(s) {
		return "", nil, errors.New(`not a data URI: it does not start with "data:"`)
	}
	rest := s[len(dataPrefix):]
	comma := strings.IndexByte(rest, ',')
	if comma < 0 {
		return "", nil, errors.New("data URI has no comma between its media type and its data")
	}
	header, payload := rest[:comma], rest[comma+1:]
	params := strings.Split(header, ";")
	isBase64 := false
	if n := len(params); n > 1 && strings.EqualFold(strings.TrimSpace(params[n-1]), "base64") {
		isBase64 = true
	}
	mediaType = strings.ToLower(strings.TrimSpace(params[0]))
	if mediaType == "" {
		mediaType = "text/plain"
	} else if !validMediaType(mediaType) {
		return "", nil, errors.New("data URI media type is not of the form type/subtype")
	}
	if isBase64 {
		data, err = decodeBase64(payload)
		if err != nil {
			return "", nil, fmt.Errorf("data URI base64 data: %w", err)
		}
		return mediaType, data, nil
	}
	data, err = percentDecode(payload)
	if err != nil {
		return "", nil, fmt.Errorf("data URI data: %w", err)
	}
	return mediaType, data, nil
}

// validMediaType reports whether t is type/subtype made of RFC 2045 token
// characters, so that a URI whose header is garbage is rejected rather than
// returned as a media type nobody can match.
func validMediaType(t string) bool {
	slash := strings.IndexByte(t, '/')
	if slash <= 0 || slash == len(t)-1 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if i == slash {
			continue
		}
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0 {
			return false
		}
	}
	return true
}

// decodeBase64 decodes either alphabet, padded or not. Whitespace is
// dropped and percent escapes undone first ('%' is in neither alphabet, so
// they cannot be mistaken for data); the alphabet is the URL one when '-' or
// '_' appears, and mixing the two is an error from the decoder.
func decodeBase64(p string) ([]byte, error) {
	if strings.IndexByte(p, '%') >= 0 {
		b, err := percentDecode(p)
		if err != nil {
			return nil, err
		}
		p = string(b)
	}
	if strings.ContainsAny(p, " \t\r\n") {
		p = strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, p)
	}
	p = strings.TrimRight(p, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(p, "-_") {
		enc = base64.RawURLEncoding
	}
	b, err := enc.DecodeString(p)
	if err != nil {
		// The decoder's message gives an offset, not the data.
		return nil, err
	}
	return b, nil
}

// percentDecode undoes %XX escapes and leaves every other byte, '+'
// included, as it is: RFC 2397 data is a URI component, not a form.
func percentDecode(p string) ([]byte, error) {
	n := strings.Count(p, "%")
	if n == 0 {
		return []byte(p), nil
	}
	out := make([]byte, 0, max(len(p)-2*n, 0))
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			out = append(out, p[i])
			continue
		}
		if i+2 >= len(p) {
			return nil, fmt.Errorf("truncated percent escape at byte %d", i)
		}
		hi, ok1 := unhex(p[i+1])
		lo, ok2 := unhex(p[i+2])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("percent escape at byte %d is not followed by two hex digits", i)
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
