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

// answerProbe answers a probe request (replay/probe) right, as a correct
// model would: the answer's words lead the generated words and, unless
// the request forbids stopping, the answer ends there. It reports whether
// the prompt was a probe. A probe is answered without reasoning.
func answerProbe(p *prompt, words []string, stopAts []int, ignoreEOS bool, minTokens int) bool {
	if len(p.texts) == 0 {
		return false
	}
	answer, ok := probe.Solve(p.texts[len(p.texts)-1])
	if !ok {
		return false
	}
	fields := strings.Fields(answer)
	if len(fields) == 0 {
		return false
	}
	for i, f := range fields[:min(len(fields), len(words))] {
		words[i] = " " + f
	}
	if !ignoreEOS && minTokens <= len(fields) {
		for i := range stopAts {
			stopAts[i] = min(len(fields), len(words))
		}
	}
	return true
}
