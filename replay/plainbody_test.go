package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestPlainBodyIsMarshaled writes random plain bodies, chat and
// completions, with appendPlainBody and with encoding/json: equal bytes
// wherever appendPlainBody writes one, and it writes every body whose
// strings need no escaping and declines every other.
func TestPlainBodyIsMarshaled(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 15))
	plainWords := []string{"llama", "gpt-4o", "a b", "x/y:z", "", "0", "Qwen2.5-7B", "the quick brown fox"}
	escaped := []string{"a<b", "x>y", "r&d", `say "hi"`, `back\slash`, "tab\there", "line\nfeed", "é", "\u2028", "\x7f", "\x00"}
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1.0 / 3, 0.7, 2, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.25e21, -3e-8, 123456789.125, 5e-324, math.MaxFloat64}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	float := func() *float64 {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return &floats[rng.IntN(len(floats))]
		}
		for {
			f := math.Float64frombits(rng.Uint64())
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				return &f
			}
		}
	}
	written := 0
	for i := range 5000 {
		chat := rng.IntN(2) == 0
		plain := rng.IntN(4) != 0
		model, text := pick(plainWords), strings.Repeat(pick(plainWords)+" ", rng.IntN(50))
		if !plain {
			if rng.IntN(2) == 0 {
				model += pick(escaped)
			} else {
				text += pick(escaped)
			}
		}
		body := requestBody{Model: model, MaxTokens: rng.Int64N(70000) - 2, Stream: rng.IntN(2) == 0,
			Temperature: float(), TopP: float(), IgnoreEOS: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			body.MinTokens = rng.Int64N(4096)
		}
		if body.Stream {
			body.StreamOptions = &struct {
				IncludeUsage bool `json:"include_usage"`
			}{true}
		}
		got, ok := appendPlainBody(nil, &body, chat, text, false)
		if ok != plain {
			t.Fatalf("body %d (model %q, text %q): written %v, want %v", i, model, text, ok, plain)
		}
		if !ok {
			continue
		}
		written++
		if chat {
			body.Messages = []any{chatMessage{Role: "user", Content: text}}
		} else {
			body.Prompt = &text
		}
		want, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("body %d:\n got %s\nwant %s", i, got, want)
		}
	}
	if written < 3000 {
		t.Fatalf("only %d of 5000 bodies were plain: the test says little", written)
	}
}

// TestPlainBodyDeclinesAContract: a body with any contract field set is
// not plain.
func TestPlainBodyDeclinesAContract(t *testing.T) {
	body := requestBody{Model: "m", MaxTokens: 4}
	body.Stop = []string{"x"}
	if got, ok := appendPlainBody(nil, &body, true, "hi", true); ok {
		t.Errorf("wrote %s for a body with stop sequences", got)
	}
}

// TestBodyContractEmptySeesEveryField sets each field of bodyContract in
// turn: empty must see every one, or appendPlainBody would drop it.
func TestBodyContractEmptySeesEveryField(t *testing.T) {
	var zero bodyContract
	if !zero.empty() {
		t.Fatal("the zero contract is not empty")
	}
	typ := reflect.TypeFor[bodyContract]()
	for i := range typ.NumField() {
		var c bodyContract
		setNonZero(t, reflect.ValueOf(&c).Elem().Field(i), typ.Field(i).Name)
		if c.empty() {
			t.Errorf("field %s set, and empty says the contract is empty", typ.Field(i).Name)
		}
	}
}

// TestPlainBodyWritesEveryPlainField sets each of requestBody's own
// fields in turn on a plain body: appendPlainBody must decline it or write
// what encoding/json writes, so a field added to requestBody and not to
// appendPlainBody cannot be dropped.
func TestPlainBodyWritesEveryPlainField(t *testing.T) {
	typ := reflect.TypeFor[requestBody]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		if field.Anonymous {
			continue // bodyContract: TestBodyContractEmptySeesEveryField
		}
		body := requestBody{Model: "m", MaxTokens: 8}
		setNonZero(t, reflect.ValueOf(&body).Elem().Field(i), field.Name)
		got, ok := appendPlainBody(nil, &body, true, "hi", true)
		if !ok {
			continue
		}
		body.Messages = []any{chatMessage{Role: "user", Content: "hi"}}
		want, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("field %s set:\n got %s\nwant %s", field.Name, got, want)
		}
	}
}

// setNonZero sets the struct field f, named name, to a value other than
// its zero.
func setNonZero(t *testing.T, f reflect.Value, name string) {
	t.Helper()
	switch f.Kind() {
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Slice:
		f.Set(reflect.MakeSlice(f.Type(), 1, 1))
	case reflect.Interface:
		f.Set(reflect.ValueOf("x"))
	case reflect.String:
		f.SetString("x")
	case reflect.Int32, reflect.Int64:
		f.SetInt(3)
	case reflect.Bool:
		f.SetBool(true)
	default:
		t.Fatalf("field %s: kind %s not handled by this test", name, f.Kind())
	}
}
