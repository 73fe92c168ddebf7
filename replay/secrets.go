package replay

import "github.com/servetrace/servetrace/replay/scrub"

// secrets lists what a run must never write: the API key, the values of
// the extra headers, and the passwords and credential-like query values of
// the target and metrics URLs.
func (o *Options) secrets() []string {
	s := make([]string, 0, 1+len(o.Headers))
	if o.APIKey != "" {
		s = append(s, o.APIKey)
	}
	for _, v := range o.Headers {
		s = append(s, v)
	}
	s = append(s, scrub.URLSecrets(o.Target)...)
	for _, m := range o.Metrics {
		s = append(s, scrub.URLSecrets(m.URL)...)
	}
	return s
}
