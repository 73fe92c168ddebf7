package replay

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"

	"github.com/servetrace/servetrace/internal/hashmix"
	"github.com/servetrace/servetrace/replay/probe"
	"github.com/servetrace/servetrace/trace"
)

// probeIDPrefix starts a probe request's id; the workload request it
// goes beside gives the rest.
const probeIDPrefix = "probe-"

// prober chooses the workload requests a probe goes beside and builds
// each probe: one of the user's (Requests.UserProbes) or one generated
// from a seed. The choice is a draw keyed by the run's seed and the
// request's id, so the workload's check, every shard and the schedule
// agree on it without sharing state.
type prober struct {
	share float64
	seed  uint64
	user  []probe.Probe
}

// newProber returns the run's prober, or nil when it sends no probes.
func newProber(o *Options) *prober {
	if o.Probes <= 0 {
		return nil
	}
	return &prober{share: o.Probes, seed: o.Seed, user: o.UserProbes}
}

// probeFor returns the probe sent beside q, or nil.
func (pr *prober) probeFor(q *trace.Request) *probe.Probe {
	pick, ok := pr.draw(q)
	if !ok {
		return nil
	}
	if len(pr.user) > 0 {
		p := pr.user[pick%uint64(len(pr.user))]
		return &p
	}
	p := probe.Generate(pick)
	return &p
}

// draw says whether q gets a probe and, if so, the number that picks it;
// the workload check counts probes with it alone, building none.
func (pr *prober) draw(q *trace.Request) (pick uint64, ok bool) {
	if pr == nil || q.SessionID != "" && q.Turn > 0 {
		return 0, false // a later turn waits on its session; its probe would not
	}
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], pr.seed)
	h.Write(b[:])
	h.Write([]byte(q.RequestID))
	d := hashmix.Finalize(h.Sum64())
	if float64(d>>11)/(1<<53) >= pr.share {
		return 0, false
	}
	// A second mix of the draw picks the probe, so which requests get
	// one and which probe they get are not tied.
	return d*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019, true
}

// probeRequest is the request that carries p beside q: sent at q's time,
// to q's model, greedy (a checkable answer should not be left to
// sampling), streamed as q is.
func probeRequest(q *trace.Request, p *probe.Probe) trace.Request {
	zero := 0.0
	return trace.Request{
		Identity:    trace.Identity{RequestID: probeIDPrefix + q.RequestID, Model: q.Model, Tenant: q.Tenant},
		TS:          q.TS,
		Shape:       trace.Shape{InputTokens: 1, OutputTokens: int64(p.MaxTokens), MaxTokens: int64(p.MaxTokens), API: trace.APIChat, Stream: q.Stream, N: 1},
		Temperature: &zero,
		Phase:       q.Phase,
	}
}

// buildProbe makes a probe's request body: its prompt as the one user
// message (or the prompt, under API completions), greedy, with room for
// the answer and no forced length, which would pad the answer.
func (r *Runner) buildProbe(q *trace.Request, p *probe.Probe) *outgoing {
	o := r.route(q) // model, API and stream as any request gets them
	o.probe = p
	body := requestBody{Model: o.model, MaxTokens: q.MaxTokens, Stream: o.stream, Temperature: q.Temperature}
	if o.stream {
		body.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	if o.api == trace.APIChat {
		body.Messages = []any{chatMessage{Role: "user", Content: p.Prompt}}
	} else {
		body.Prompt = &p.Prompt
	}
	b, err := json.Marshal(body)
	if err != nil {
		o.notSent = "not sent: the probe could not be encoded: " + err.Error()
		return o
	}
	o.body, o.prompt = b, p.Prompt
	o.promptTokensSent = countText(r.prompt.Counter(), p.Prompt)
	return o
}

// buildPlanned builds a planned request: a probe's own body, or the
// workload request's after sess's history.
func (r *Runner) buildPlanned(p *planned, sess *session) *outgoing {
	if p.probe != nil {
		return r.buildProbe(p.req, p.probe)
	}
	return r.build(p.req, sess)
}

// gradeProbe grades an ok probe's answer into its result; the answer is
// dropped after. The collector runs it, off the send path (a pattern's
// grade costs the answer's length times its program); a variable, so
// tests can watch where it runs.
var gradeProbe = func(res *trace.Result, p *probe.Probe, answer []byte) {
	if res.Outcome == trace.OutcomeOK {
		res.ProbeCorrect = new(p.Grade(string(answer)))
	}
}

// grade grades a probe's answer for the collector: one cut at
// maxKeptReply is graded wrong, unread, and noted.
func (r *Runner) grade(res *trace.Result, p *probe.Probe, answer []byte) {
	if len(answer) >= maxKeptReply && res.Outcome == trace.OutcomeOK {
		r.notes.add(fmt.Sprintf("probe answers of %d MiB or more were graded wrong, unread", maxKeptReply>>20), res.RequestID)
		res.ProbeCorrect = new(false)
		return
	}
	gradeProbe(res, p, answer)
}
