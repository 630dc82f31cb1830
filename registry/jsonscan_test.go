package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/agcore/agrun/internal/textsafe"
)

// referenceDecode is the decoder decodeStrict replaced, built on
// encoding/json's token API: the oracle of TestDecodeStrictMatches and
// FuzzDecodeStrict. Both must accept the same inputs and return the same
// values.
func referenceDecode(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := referenceValue(d, nil, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("not JSON: unexpected data after the value")
	}
	return v, nil
}

func referenceValue(d *json.Decoder, path []string, depth int) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%s: nesting deeper than %d", pointer(path), MaxDepth)
		}
		switch t {
		case '{':
			obj := map[string]any{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errors.New("not JSON: object key is not a string")
				}
				if _, dup := obj[key]; dup {
					return nil, fmt.Errorf("%s: duplicate key %q", pointer(path), textsafe.Truncate(key, 64))
				}
				v, err := referenceValue(d, append(path, key), depth+1)
				if err != nil {
					return nil, err
				}
				obj[key] = v
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for i := 0; d.More(); i++ {
				v, err := referenceValue(d, append(path, strconv.Itoa(i)), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := d.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, errors.New("not JSON: unexpected delimiter")
	case json.Number:
		if err := checkNumber(string(t)); err != nil {
			return nil, fmt.Errorf("%s: %w", pointer(path), err)
		}
		return t, nil
	default:
		return t, nil
	}
}

var decodeCases = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, ` { "a" : [ 1 , 2.5 , -3e2 , true , false , null ] } `,
	`"x"`, `1`, `-0`, `0.5`, `1e5`, `1E+5`, `1e-5`, `-`, `01`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x1`,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a" 1}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`,
	`{"a":1}{}`, `{"a":1} x`, `{"a":1}  `, `tru`, `truex`, `nul`, `[true,fals]`, `{"a":nulL}`,
	`"a\"b\\c\/d\b\f\n\r\t"`, `"\u0041\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`,
	`"\ud83d\u0041"`, `"\ude00"`, `"\ud83d\ud83d\ude00"`, `"\u12"`, `"\u12g4"`, `"\x"`, `"\`, `"abc`,
	"\"tab\there\"", "\"nl\nhere\"", "\"\x7f\"", "\"caf\xc3\xa9\"", "\"bad\xff\xfe\"", "\"\xe2\x82\"",
	"\"\xed\xa0\x80\"", `{"a":1,"a":2}`, `{"x":{"k":1,"k":2}}`, `{"a\u0062":1,"ab":2}`,
	`{"n":1e10000000}`, `{"n":-1e-10000000}`, `[1e400]`, `[1e401]`, `[` + strings.Repeat("1", 129) + `]`,
	strings.Repeat("[", 128) + strings.Repeat("]", 128), strings.Repeat("[", 129) + strings.Repeat("]", 129),
	`{"a":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `}`,
	`{"a":` + strings.Repeat("[", 128) + strings.Repeat("]", 128) + `}`,
	"\ufeff{}", "{}\x00", `{"a":[{"b":[1,{"c":"d"}]}]}`,
}

// TestDecodeStrictMatches checks decodeStrict against the reference on
// hand-picked inputs: the same verdict, the same value, and for the
// refusals that name a place, the same message.
func TestDecodeStrictMatches(t *testing.T) {
	for _, in := range decodeCases {
		compareDecoders(t, []byte(in))
	}
}

func compareDecoders(t *testing.T, in []byte) {
	t.Helper()
	got, gerr := decodeStrict(in)
	want, werr := referenceDecode(in)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%q: decodeStrict error %v, reference error %v", in, gerr, werr)
	}
	if gerr != nil {
		if strings.HasPrefix(werr.Error(), "/") && gerr.Error() != werr.Error() {
			t.Errorf("%q: message %q, reference %q", in, gerr, werr)
		}
		if !strings.HasPrefix(werr.Error(), "/") && !strings.HasPrefix(gerr.Error(), "not JSON") {
			t.Errorf("%q: syntax error %q does not start with \"not JSON\"", in, gerr)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q: got %#v, reference %#v", in, got, want)
	}
}

// FuzzDecodeStrict compares decodeStrict with the reference on any input.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range decodeCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		compareDecoders(t, in)
	})
}

// BenchmarkDecodeStrict compares decodeStrict with the token-based
// reference it replaced, on the 880-byte arguments of internal/cmd/bench and
// on 64 KiB of text with escapes.
func BenchmarkDecodeStrict(b *testing.B) {
	small, _ := json.Marshal(map[string]string{"text": strings.Repeat("the quick brown fox jumps over the lazy dog\n", 20)})
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("lorem ipsum dolor sit amet\n", 64<<10/27)})
	for _, in := range []struct {
		name string
		data []byte
	}{{"880B", small}, {"64KiB", big}} {
		for _, dec := range []struct {
			name string
			f    func([]byte) (any, error)
		}{{"decodeStrict", decodeStrict}, {"reference", referenceDecode}} {
			b.Run(in.name+"/"+dec.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.data)))
				for b.Loop() {
					if _, err := dec.f(in.data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
