package datasets

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/servetrace/servetrace/trace"
	"github.com/servetrace/servetrace/trace/anon"
)

// FormatBurstGPT is the BurstGPT trace CSV (Wang et al., 2024): Timestamp
// (seconds from the trace's start), Model, Request tokens, Response tokens,
// Total tokens, Log Type, and in later releases Session ID and Elapsed time
// (seconds). Failed requests show 0 response tokens.
const FormatBurstGPT = "burstgpt"

func readBurstGPT(ctx context.Context, br *bufio.Reader, opts Options, sink Sink) (Stats, error) {
	cr := newFastCSV(br) // no record is kept past its callback
	header, col, err := csvColumns(cr, opts.Name)
	if err != nil {
		return Stats{}, err
	}
	need := func(names ...string) (int, bool) {
		for _, n := range names {
			if i, ok := col[n]; ok {
				return i, true
			}
		}
		return -1, false
	}
	iTS, ok1 := need("timestamp")
	iIn, ok2 := need("request tokens")
	iOut, ok3 := need("response tokens")
	if !ok1 || !ok2 || !ok3 {
		return Stats{}, fmt.Errorf("%s line 1: BurstGPT header needs Timestamp, Request tokens and Response tokens, found %d columns", opts.Name, len(header))
	}
	iModel, _ := need("model")
	iLog, _ := need("log type")
	iSession, hasSession := need("session id", "sessionid", "session_id")
	iElapsed, hasElapsed := need("elapsed time", "elapsed_time", "elapsed")
	salt := opts.Log.Salt
	if salt.IsZero() {
		salt = anon.RandomSalt()
	}
	sessions := newBurstSessions(maxBurstGPTSessions)
	anchor := opts.Start.UnixMicro()
	st := Stats{TimesRelative: true}
	err = eachCSVRecord(ctx, cr, opts, sink, &st, func(rec []string, line int64) error {
		field := func(i int) string {
			if i < 0 || i >= len(rec) {
				return ""
			}
			return strings.TrimSpace(rec[i])
		}
		req, reason := burstGPTRow(field, iTS, iIn, iOut, anchor)
		if reason == "" && hasElapsed && field(iElapsed) != "" {
			e, err := strconv.ParseFloat(field(iElapsed), 64)
			if err != nil || e < 0 || math.IsNaN(e) {
				reason = "Elapsed time is not a non-negative number of seconds"
			} else {
				req.E2EMs = new(e * 1000)
			}
		}
		if reason != "" {
			return st.reject(sink, opts.Name, line, reason)
		}
		req.RequestID = fmt.Sprintf("%s-%d", idPrefix(opts.Name), line)
		req.Model = cmpOr(field(iModel), opts.Model)
		if lt := field(iLog); lt != "" {
			req.Features = []string{strings.ReplaceAll(strings.ToLower(lt), " ", "_")}
		}
		req.API, req.Stream = opts.API, opts.Stream
		if hasSession && field(iSession) != "" {
			key := salt.ID64("session", field(iSession))
			req.SessionID = fmt.Sprintf("%016x", uint64(key)) // salt.ID's
			s := sessions.seen(key)
			s.turn++
			setTurn(&req, s.turn, s.endUs)
			s.endUs = -1
			if req.E2EMs != nil {
				s.endUs = req.TS + int64(*req.E2EMs*1000)
			}
		}
		return st.accept(sink, opts.Name, line, &req)
	})
	if sessions.forgotten > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%s: %d sessions were forgotten, more than %d being open at once (the least recently seen first): a later turn of one starts a new session at turn 0", opts.Name, sessions.forgotten, maxBurstGPTSessions))
	}
	if err != nil {
		return st, err
	}
	return st, nil
}

// burstGPTRow reads the required columns; a non-empty reason rejects.
func burstGPTRow(field func(int) string, iTS, iIn, iOut int, anchor int64) (trace.Request, string) {
	var req trace.Request
	ts, err := strconv.ParseFloat(field(iTS), 64)
	if err != nil || ts < 0 || math.IsNaN(ts) || math.IsInf(ts, 0) {
		return req, "Timestamp is not a non-negative number of seconds"
	}
	in, err := parseCount(field(iIn), "Request tokens")
	if err != nil {
		return req, err.Error()
	}
	out, err := parseCount(field(iOut), "Response tokens")
	if err != nil {
		return req, err.Error()
	}
	req.TS = anchor + int64(math.Round(ts*1e6))
	req.InputTokens, req.OutputTokens, req.MaxTokens, req.N = in, out, out, 1
	return req, ""
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
