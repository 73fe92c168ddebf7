package datasets

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/servetrace/servetrace/internal/memcap"
)

// repeatReader yields b over and over, n bytes in all.
type repeatReader struct {
	b    byte
	left int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.left))
	for i := range n {
		p[i] = r.b
	}
	r.left -= int64(n)
	return n, nil
}

// TestLongCSVRecordsAreBounded (issue 46, 15: the inner document's bound,
// the class): a CSV record obeys the bound of a line (MaxLineBytes) as a
// JSON line does, within 256 MiB: an Azure trace's 320 MiB line is
// rejected and the rows around it convert; a CSV log's record whose
// quoted field never closes fails the conversion naming where it began.
// Before, encoding/csv and the fast splitter held the whole record and
// both ran out of the cap.
func TestLongCSVRecordsAreBounded(t *testing.T) {
	const long = 320 << 20
	memcap.Run(t, 256<<20, func(t *testing.T) {
		azure := io.MultiReader(strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50,"),
			&repeatReader{'7', long}, strings.NewReader("\n2023-11-16 18:15:51.0000000,100,10\n"))
		var sink memSink
		st, err := Read(context.Background(), azure, Options{Name: "azure.csv", Format: FormatAzure}, &sink)
		if err != nil || st.Rows != 2 || len(sink.rejects) != 1 || sink.rejects[0].Line != 3 || !strings.Contains(sink.rejects[0].Reason, "longer than 16 MiB") {
			t.Errorf("azure: %d rows, rejects %+v, error %v; want 2 rows and line 3 rejected as longer than 16 MiB", st.Rows, sink.rejects, err)
		}
		m := mustMapping(t, "ts: time\nprompt_tokens: in_tok\ncompletion_tokens: out_tok\nmessages: msgs\n")
		log := io.MultiReader(strings.NewReader("time,in_tok,out_tok,msgs\n2025-03-01 10:00:00,5,2,\n2025-03-01 10:00:01,5,2,\"[{"),
			&repeatReader{'x', long})
		_, err = Read(context.Background(), log, Options{Name: "log.csv", Format: FormatCSV, Log: LogOptions{Mapping: m, Salt: testSalt(t)}}, &memSink{})
		if err == nil || !strings.Contains(err.Error(), "log.csv") || !strings.Contains(err.Error(), "after line 2") || !strings.Contains(err.Error(), "longer than 16 MiB") {
			t.Errorf("csv log: error %v; want one naming log.csv, a record after line 2 longer than 16 MiB", err)
		}
	})
}
