package replay

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// imageServer serves the run's synthetic images on a loopback port, for
// ImageTransport "url": the request then carries a URL that the server
// fetches, as clients that host their images do. Paths name the image
// (mediaKey.path); only images the run has built are served.
type imageServer struct {
	cache *mediaCache
	srv   *http.Server
	base  string
	// keys holds path → mediaKey for every image a body has named.
	keys sync.Map
	done chan struct{}
	once sync.Once
}

// startImageServer listens on 127.0.0.1 and serves until ctx ends or stop
// is called.
func startImageServer(ctx context.Context, cache *mediaCache) (*imageServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("image server: %w", err)
	}
	s := &imageServer{cache: cache, base: "http://" + ln.Addr().String()}
	s.srv = serveBounded(ln, http.HandlerFunc(s.serve), imageServerConns, false)
	s.done = make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			s.stop()
		case <-s.done:
		}
	}()
	return s, nil
}

func (s *imageServer) serve(w http.ResponseWriter, r *http.Request) {
	v, ok := s.keys.Load(r.URL.Path)
	if !ok || r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.NotFound(w, r)
		return
	}
	k := v.(mediaKey)
	raw, _, err := s.cache.get(k)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "image/"+strings.TrimPrefix(k.format, "image/"))
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Write(raw)
}

// url returns the image's URL, which it serves from now on.
func (s *imageServer) url(k mediaKey) string {
	p := k.path()
	s.keys.Store(p, k)
	return s.base + p
}

// stop shuts the server down, once.
func (s *imageServer) stop() {
	s.once.Do(func() {
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.srv.Shutdown(ctx)
	})
}
