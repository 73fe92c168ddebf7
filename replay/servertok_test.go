package replay

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestServerCountRefusesImpossibleAnswers: a /tokenize answer with more
// ids than its text has bytes is a fault, refused before its ids are held
// (before, 2M ids for " the" were counted as a 2M-token prompt).
func TestServerCountRefusesImpossibleAnswers(t *testing.T) {
	for _, n := range []int{21, 2_000_000} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"tokens":[%s1]}`, strings.Repeat("1,", n-1))
		}))
		opts := DefaultOptions()
		c := &serverCounter{url: srv.URL + "/tokenize", model: "m", client: srv.Client(), headers: func(*http.Request) {}, opts: &opts}
		_, err := c.count(" the")
		if err == nil {
			t.Errorf("%d ids for 4 bytes of text were counted", n)
		}
		srv.Close()
	}
}
