package sim

import (
	"encoding/binary"
	"hash/fnv"
	"strings"

	"github.com/servetrace/servetrace/replay/probe"
)

// greedyBelow is the temperature under which a request is decoded
// greedily, as vLLM's sampler treats it (_SAMPLING_EPS, 1e-5).
const greedyBelow = 1e-5

// corruptedWords turns an answer's word seed into another's: a corrupted
// answer has the length of the right one and none of its words' order.
const corruptedWords = 0x9e3779b97f4a7c15

// promptSeed is the word seed of a greedy answer: a function of the
// simulator's Seed, the model and the prompt's tokens alone (media by
// their token counts), so that the
// same prompt gets the same answer in any run, at any load.
func (s *Server) promptSeed(model string, pc *promptCount) int64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.opts.Seed)
	h.Write(b[:])
	h.Write([]byte(model))
	h.Write([]byte{0})
	put := func(ids []int) {
		for _, id := range ids {
			binary.LittleEndian.PutUint64(b[:], uint64(id))
			h.Write(b[:])
		}
	}
	put(pc.tools)
	for _, t := range pc.texts {
		put(t)
	}
	put([]int{int(pc.imageTokens), int(pc.audioTokens)})
	return int64(h.Sum64() >> 1)
}

// corrupts draws whether a request arriving now is answered wrong: with
// CorruptShare once CorruptInFlight requests are in the server. Its draws come from
// a stream of their own, so turning it on moves no other fault.
func (s *Server) corrupts() bool {
	if s.opts.CorruptShare <= 0 || s.inFlight.Load() < int64(s.opts.CorruptInFlight) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.corruptRNG.Float64() < s.opts.CorruptShare
}

// probeAnswer returns the answer to a probe request (replay/probe) as a
// correct model gives it, its words each with its leading space, or nil
// when the prompt is no probe. The answer leads the generated words
// (generation.drawWords) and is answered without reasoning.
func probeAnswer(p *prompt) []string {
	if len(p.texts) == 0 {
		return nil
	}
	answer, ok := probe.Solve(p.texts[len(p.texts)-1])
	if !ok {
		return nil
	}
	fields := strings.Fields(answer)
	for i, f := range fields {
		fields[i] = " " + f
	}
	if len(fields) == 0 {
		return nil
	}
	return fields
}

// stopAtAnswer ends every choice with a probe's answer, unless the
// request forbids stopping there.
func stopAtAnswer(answer []string, maxTokens int, stopAts []int, ignoreEOS bool, minTokens int) {
	if ignoreEOS || minTokens > len(answer) {
		return
	}
	for i := range stopAts {
		stopAts[i] = min(len(answer), maxTokens)
	}
}
