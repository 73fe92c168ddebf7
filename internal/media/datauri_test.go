package media

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseDataURI(t *testing.T) {
	// The PNG signature, 89 50 4E 47 0D 0A 1A 0A, is "iVBORw0KGgo=" in
	// base64; FB FF is "+/8=" in the standard alphabet and "-_8=" in the
	// URL one.
	pngSig := []byte("\x89PNG\r\n\x1a\n")
	cases := []struct {
		name, uri, mediaType string
		data                 []byte
	}{
		{"base64 png", "data:image/png;base64,iVBORw0KGgo=", "image/png", pngSig},
		{"unpadded", "data:image/png;base64,iVBORw0KGgo", "image/png", pngSig},
		{"wrapped and cased", "DATA:Image/PNG;BASE64,iVBO\r\nRw0K Ggo=", "image/png", pngSig},
		{"std alphabet", "data:application/octet-stream;base64,+/8=", "application/octet-stream", []byte{0xfb, 0xff}},
		{"url alphabet", "data:application/octet-stream;base64,-_8", "application/octet-stream", []byte{0xfb, 0xff}},
		{"escaped base64", "data:application/octet-stream;base64,%2B%2F8%3D", "application/octet-stream", []byte{0xfb, 0xff}},
		{"percent text", "data:,Hello%2C%20World%21", "text/plain", []byte("Hello, World!")},
		{"plus is literal", "data:text/plain;charset=utf-8,a+b%20c", "text/plain", []byte("a+b c")},
		{"empty", "data:,", "text/plain", []byte{}},
		{"empty base64", "data:;base64,", "text/plain", []byte{}},
		{"comma in data", "data:text/csv,a,b", "text/csv", []byte("a,b")},
	}
	for _, c := range cases {
		mt, data, err := ParseDataURI(c.uri)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if mt != c.mediaType || !bytes.Equal(data, c.data) {
			t.Errorf("%s: got %q %q, want %q %q", c.name, mt, data, c.mediaType, c.data)
		}
	}
}

func TestParseDataURIRejects(t *testing.T) {
	cases := []struct{ name, uri, says string }{
		{"not data", "https://example.com/a.png", "data:"},
		{"no comma", "data:image/png;base64", "comma"},
		{"bad base64", "data:image/png;base64,c2VjcmV0@secret", "base64"},
		{"padding inside", "data:image/png;base64,iV==BORw", "base64"},
		{"mixed alphabets", "data:image/png;base64,+/-_", "base64"},
		{"bad escape", "data:,secret%zz", "hex"},
		{"cut escape", "data:,secret%4", "percent"},
		{"bad media type", "data:secret;base64,AAAA", "media type"},
	}
	for _, c := range cases {
		_, _, err := ParseDataURI(c.uri)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.says)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %q quotes the content", c.name, err)
		}
	}
}

func TestDataURIRoundTrip(t *testing.T) {
	wav, err := SynthWAV(3, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{nil, {0}, {0xfb, 0xff}, wav} {
		uri := DataURI("audio/wav", data)
		if !IsDataURI(uri) {
			t.Errorf("IsDataURI(%.40q) = false", uri)
		}
		mt, got, err := ParseDataURI(uri)
		if err != nil || mt != "audio/wav" || !bytes.Equal(got, data) {
			t.Errorf("round trip of %d bytes: %q, %d bytes, %v", len(data), mt, len(got), err)
		}
	}
	if got, want := DataURI("image/png", []byte("\x89PNG\r\n\x1a\n")), "data:image/png;base64,iVBORw0KGgo="; got != want {
		t.Errorf("DataURI = %q, want %q", got, want)
	}
}

func TestIsDataURI(t *testing.T) {
	cases := []struct {
		s    string
		want bool
	}{
		{"data:,x", true},
		{"Data:image/png;base64,AA==", true},
		{"data:", true},
		{"data", false},
		{"https://example.com/data:x", false},
		{" data:,x", false},
		{"", false},
	}
	for _, c := range cases {
		if got := IsDataURI(c.s); got != c.want {
			t.Errorf("IsDataURI(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}

func FuzzParseDataURI(f *testing.F) {
	for _, s := range []string{
		"data:image/png;base64,iVBORw0KGgo=",
		"data:,Hello%2C%20World%21",
		"data:;base64,-_8",
		"data:text/plain;charset=utf-8,%",
		"data:%%%,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mt, data, err := ParseDataURI(s)
		if err != nil {
			return
		}
		if mt == "" {
			t.Errorf("no media type and no error")
		}
		// Decoding never grows the data.
		if len(data) > len(s) {
			t.Errorf("%d bytes decoded from %d", len(data), len(s))
		}
	})
}
