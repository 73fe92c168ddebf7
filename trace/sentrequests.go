package trace

import (
	"fmt"
	"io"
	"path/filepath"
)

// sentRow is the two columns of a result that say which requests a run
// sent.
type sentRow struct {
	RequestID string `parquet:"request_id"`
	SentNs    *int64 `parquet:"sent_ns,optional"`
}

// EachSentRequest calls fn with the request id of every result of the
// run at runDir that was sent (sent_ns set), reading the parts
// ResultParts lists a row group at a time and only those two columns, so
// a run of any length is read in bounded memory.
func EachSentRequest(runDir string, fn func(requestID string)) error {
	parts, err := ResultParts(runDir)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := eachSentInPart(filepath.Join(runDir, p.Path), fn); err != nil {
			return err
		}
	}
	return nil
}

// eachSentInPart is EachSentRequest for one part.
func eachSentInPart(path string, fn func(requestID string)) error {
	pf, err := openPartFile[sentRow](path)
	if err != nil {
		return err
	}
	defer pf.close()
	if _, ok := pf.pf.Schema().Lookup("request_id"); !ok {
		return fmt.Errorf("read part %s: no request_id column: not a servetrace results part", path)
	}
	for {
		row, err := pf.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if row.SentNs != nil {
			fn(row.RequestID)
		}
	}
}
