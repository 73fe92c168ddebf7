package replay

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/servetrace/servetrace/replay/sim"
)

// simChildEnv makes the test binary serve the simulator instead of running
// tests, so benchmarks can load a server in a separate process (pinned to
// its own core with taskset).
const simChildEnv = "SERVETRACE_SIM_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(simChildEnv) != "" {
		serveSimChild()
		return
	}
	os.Exit(m.Run())
}

// serveSimChild serves a zero-delay simulator on a free loopback port,
// prints its URL, and exits when standard input closes.
func serveSimChild() {
	o := sim.DefaultOptions()
	p, _ := sim.LookupPreset("zero")
	o.Engine, o.Preset = p.Engine, p.Name
	s, err := sim.New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rs, err := s.Start("127.0.0.1:0", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(rs.URL)
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	rs.Close()
}
