package sim

import "encoding/json"

// The request fields that can hold most of a body (a prompt, a message's
// content, an inline image) are decoded straight into their text, not
// kept as raw JSON and decoded again: a long prompt is then held once, not
// twice, while the request is read. A value of the wrong shape is marked
// bad, for the request's checks to name, rather than failing the body's
// decoding.

// promptField is the completions prompt: a string, or a list of one
// string.
type promptField struct {
	text       string
	given, bad bool
}

func (f *promptField) UnmarshalJSON(b []byte) error {
	f.given = true
	if json.Unmarshal(b, &f.text) == nil { // a string, or null
		return nil
	}
	var list []string
	if json.Unmarshal(b, &list) == nil && len(list) == 1 {
		f.text = list[0]
		return nil
	}
	f.bad = true
	return nil
}

// contentField is a chat message's content: a string, null, or a list of
// parts.
type contentField struct {
	text  string
	parts []contentPart
	bad   bool
}

func (f *contentField) UnmarshalJSON(b []byte) error {
	if json.Unmarshal(b, &f.text) == nil { // a string, or null
		return nil
	}
	if json.Unmarshal(b, &f.parts) != nil {
		f.parts, f.bad = nil, true
	}
	return nil
}

// imageURLField is a part's image_url: an object with a url, or a bare
// string.
type imageURLField struct {
	url string
	ok  bool
}

func (f *imageURLField) UnmarshalJSON(b []byte) error {
	if json.Unmarshal(b, &f.url) == nil { // a string, or null
		f.ok = true
		return nil
	}
	var obj struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(b, &obj) == nil && obj.URL != "" {
		f.url, f.ok = obj.URL, true
	}
	return nil
}
