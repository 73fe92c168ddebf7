package replay

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/servetrace/servetrace/internal/opterr"
	"github.com/servetrace/servetrace/internal/regfile"
	"github.com/servetrace/servetrace/replay/h1"
	"github.com/servetrace/servetrace/replay/scrub"
)

// newHTTPClient returns a client tuned for load generation: one protocol
// chosen explicitly (HTTP/1.1 by default: h2 multiplexing couples timings
// across streams), no compression, and enough idle connections per host
// that connections are reused, not churned. HTTP/1.1 to plain http://
// endpoints goes through h1, which spares each request net/http's
// goroutine hand-offs.
func newHTTPClient(o Options) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 100000,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      16 << 10,
		Protocols:           new(http.Protocols),
		// One bound on a response's head for every transport: h1's.
		MaxResponseHeaderBytes: h1.DefaultMaxResponseHeaderBytes,
	}
	switch o.HTTP {
	case "", HTTP1:
		tr.Protocols.SetHTTP1(true)
	case HTTP2:
		// TLS endpoints negotiate h2 by ALPN; plain http:// ones are spoken
		// to in h2 by prior knowledge.
		tr.Protocols.SetHTTP2(true)
		tr.Protocols.SetUnencryptedHTTP2(true)
	default:
		return nil, opterr.New("HTTP", string(o.HTTP), "use 1.1 or 2")
	}
	if o.CACert != "" || o.Insecure {
		cfg := &tls.Config{InsecureSkipVerify: o.Insecure}
		if o.CACert != "" {
			pem, err := regfile.ReadFile(o.CACert, maxCACertBytes)
			if err != nil {
				return nil, opterr.New("CACert", o.CACert, "%v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, opterr.New("CACert", o.CACert, "holds no PEM certificate")
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	var rt http.RoundTripper = tr
	if o.HTTP != HTTP2 {
		// Plain http:// exchanges run on the sending goroutine; https
		// and the rest go to net/http's transport.
		rt = &h1.Transport{DialContext: tr.DialContext, Fallback: tr, MaxIdleConnsPerHost: tr.MaxIdleConnsPerHost,
			IdleConnTimeout: tr.IdleConnTimeout, ReadBufferSize: tr.ReadBufferSize}
	}
	return &http.Client{Transport: rt, CheckRedirect: o.checkRedirect}, nil
}

// maxRedirects is how many redirects a request follows at most, with
// FollowRedirects.
const maxRedirects = 10

// checkRedirect decides whether the client follows a redirect, for every
// request replay makes. A redirect can take the Authorization header and
// the extra headers to another port or host, resend the body, or turn a
// POST into a GET: unless FollowRedirects is set none is followed, and
// with it only one within the first request's origin that keeps the
// method, with the Authorization header, the extra headers and the URL's
// user info removed. The 3xx response is then what the caller sees
// (redirectNote says why it was not followed).
func (o *Options) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if !o.FollowRedirects || len(via) > maxRedirects || origin(req.URL) != origin(first.URL) || req.Method != first.Method {
		return http.ErrUseLastResponse
	}
	req.Header.Del("Authorization")
	for k := range o.Headers {
		req.Header.Del(k)
	}
	req.URL.User = nil // else net/http sends it again as basic auth
	return nil
}

// redirectNote says where a 3xx response pointed (the Location's origin,
// redacted) and why it was not followed.
func (o *Options) redirectNote(resp *http.Response) string {
	loc, err := resp.Location()
	if err != nil {
		return "a redirect without a usable Location, not followed"
	}
	to := scrub.URL(loc.Scheme + "://" + loc.Host)
	from := resp.Request.URL
	switch {
	case !o.FollowRedirects:
		return fmt.Sprintf("redirect to %s not followed (following redirects was not asked for)", to)
	case origin(loc) != origin(from):
		return fmt.Sprintf("redirect to another origin, %s, not followed", to)
	case resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusSeeOther:
		return fmt.Sprintf("redirect to %s not followed: it would resend the %s as a GET", to, resp.Request.Method)
	}
	return fmt.Sprintf("more than %d redirects, the last to %s; not followed", maxRedirects, to)
}

// httpStatusError describes a non-2xx answer to a request replay makes.
func (o *Options) httpStatusError(resp *http.Response) string {
	s := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		s += ", " + o.redirectNote(resp)
	}
	return s
}

// endpoint returns the target's URL for path: the path joined to the
// target's, its query (an api-version, say) kept.
func (o *Options) endpoint(path string) string {
	u, err := url.Parse(o.Target)
	if err != nil {
		return o.Target + path
	}
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	return u.String()
}

// The values of the headers every request carries.
var (
	jsonContentType = []string{"application/json"}
	sseAccept       = []string{"text/event-stream"}
)

// setHeaders adds authorization and the user's extra headers.
func (r *Runner) setHeaders(req *http.Request) {
	if r.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.opts.APIKey)
	}
	for k, v := range r.opts.Headers {
		req.Header.Set(k, v)
	}
}

// roundTrip sends a generation request. Unless redirects are followed
// or the URL carries user info (which http.Client turns into basic
// auth), the client would hand the request to its transport and return
// the answer as it is, 3xx included: the transport is then asked
// directly, sparing the client's copies of the request's headers and
// URL, and its errors are worded as the client's.
func (r *Runner) roundTrip(req *http.Request) (*http.Response, error) {
	if r.opts.FollowRedirects || req.URL.User != nil {
		return r.client.Do(req)
	}
	resp, err := r.client.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// maxCACertBytes bounds the CA certificate file, a PEM bundle: a system's
// whole bundle is a few hundred KiB.
const maxCACertBytes = 1 << 20
