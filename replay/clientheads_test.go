package replay

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestResponseHeadBoundedOverEveryTransport: a 2 MiB response head is
// refused over HTTP/2 as over h1's HTTP/1.1 (net/http's own default let
// 10 MB through).
func TestResponseHeadBoundedOverEveryTransport(t *testing.T) {
	for _, proto := range []HTTPVersion{HTTP1, HTTP2} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := range 2048 {
				w.Header().Add("X-Pad", strings.Repeat("p", 1000)+string(rune('a'+i%26)))
			}
			w.Write([]byte("ok"))
		}))
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		opts := DefaultOptions()
		opts.HTTP = proto
		c, err := newHTTPClient(opts)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
			t.Errorf("HTTP %s: a 2 MiB response head was taken (proto %s)", proto, resp.Proto)
		}
		srv.Close()
	}
}
