package loop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/registry"
)

// PageToolName is the loop's built-in, read-only tool that reads a tool
// result the model was shown cut (see Config.MaxToolMessageBytes) or left
// out (see Config.ContextWindow). The name is reserved: a registry tool of
// this name is never offered to the model.
const PageToolName = "agrun_result_page"

// DefaultPageBytes is the length of a page when the model asks for none,
// and the longest page when no cap applies.
const DefaultPageBytes = 16 << 10

// pageToolDef is what the model sees of the page tool.
var pageToolDef = registry.Definition{
	Name: PageToolName,
	Description: "Read part of an earlier tool result that was cut or left out of the conversation. " +
		"offset and length count bytes of the result's text: of the string itself for a text result, " +
		"of its main text field (named in the note and the page as \"field\") for an object that is mostly one text, " +
		"else of its JSON. Returns the text and the next offset.",
	Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"call_id":{"type":"string","description":"the id of the tool call whose result to read"},` +
		`"offset":{"type":"integer","minimum":0,"description":"first byte to read (default 0)"},` +
		`"length":{"type":"integer","minimum":1,"description":"bytes to read (default and maximum: the page size the cut result's note names)"}},` +
		`"required":["call_id"],"additionalProperties":false}`),
}

// toolLimit is the cap on the tool message of a call to the tool name:
// Config.ToolResultLimit's answer, else Config.MaxToolMessageBytes; 0 is
// no cap.
func (c *Cycle) toolLimit(name string) int {
	if c.cfg.ToolResultLimit != nil {
		switch v := c.cfg.ToolResultLimit(name); {
		case v < 0:
			return 0
		case v > 0:
			return max(v, minToolMessageBytes)
		}
	}
	return c.cfg.MaxToolMessageBytes
}

// minToolMessageBytes is the smallest cap: enough for the note of a cut.
const minToolMessageBytes = 1024

// pageMax is the longest page the page tool returns under a cap: its JSON
// (text escaped at most twice over, as cleaned text has no control
// characters but newlines and tabs) stays within the cap.
func pageMax(limit int) int {
	if limit <= 0 {
		return DefaultPageBytes
	}
	return max(256, min(DefaultPageBytes, limit/2-256))
}

// boundOutput is the tool message content for a cleaned result: the JSON
// itself when it fits in limit bytes (limit 0: always), else a valid JSON
// text of at most limit bytes that shows the result's head and tail with a
// note saying its full size and how to read the rest (PageToolName with
// callID): a string result stays a string; any other becomes
// {"truncated":true,"bytes":N,"head":"...","tail":"...","note":"..."}
// where head and tail are pieces of its JSON text. cut says it was cut.
func boundOutput(out json.RawMessage, limit int, callID string) (content string, cut bool) {
	if limit <= 0 || len(out) <= limit {
		return string(out), false
	}
	text, field, isString := pageable(string(out))
	var rest json.RawMessage // an object's other members, when they are small
	if field != "" {
		if r, ok := without(out, field); ok && len(r) <= limit/4 {
			rest = r
		}
	}
	total := len(text)
	k := limit // bytes of text to show, head and tail together
	for range 64 {
		if k < 0 {
			k = 0
		}
		h := runeFloor(text, k/2)
		t := runeCeil(text, total-(k-h))
		if t < h {
			t = h
		}
		note := cutNote(total, h, t, isString, field, callID, pageMax(limit))
		var b []byte
		switch {
		case isString:
			b = marshalString(text[:h] + "\n" + note + "\n" + text[t:])
		case field != "":
			b = marshalNoHTML(struct {
				Truncated bool            `json:"truncated"`
				Field     string          `json:"field"`
				Bytes     int             `json:"bytes"`
				Head      string          `json:"head"`
				Tail      string          `json:"tail"`
				Others    json.RawMessage `json:"others,omitempty"`
				Note      string          `json:"note"`
			}{true, field, total, text[:h], text[t:], rest, note})
		default:
			b = marshalNoHTML(struct {
				Truncated bool   `json:"truncated"`
				Bytes     int    `json:"bytes"`
				Head      string `json:"head"`
				Tail      string `json:"tail"`
				Note      string `json:"note"`
			}{true, total, text[:h], text[t:], note})
		}
		if len(b) <= limit || k == 0 {
			return string(b), true
		}
		// The shown text grew by its escapes: scale it to what is left
		// beside the note, and always shrink.
		over := len(note) + 96 + len(rest)
		if room, used := limit-over, len(b)-over; room > 0 && used > 0 {
			k = min(k-1, int(int64(k)*int64(room)/int64(used)))
		} else {
			k = 0
		}
	}
	return string(marshalString(textsafe.Truncate(cutNote(total, 0, total, isString, field, callID, pageMax(limit)), limit-2))), true
}

// pageable is the text of a result raw that a cut shows and the page tool
// reads: a string result's text (isString); for an object one of whose
// members is a string making at least half of its JSON (a file's
// contents, a page's body), that member's text, field its name — paging
// the object's JSON would give the model that text escaped twice over;
// else raw's JSON text.
func pageable(raw string) (text, field string, isString bool) {
	// The first byte says what it can be (one decode, not a failed one
	// first: each scans the whole result).
	var first byte
	if t := strings.TrimLeft(raw, " \t\r\n"); t != "" {
		first = t[0]
	}
	var s string
	if first == '"' && json.Unmarshal([]byte(raw), &s) == nil {
		return s, "", true
	}
	var members map[string]json.RawMessage
	if first != '{' || json.Unmarshal([]byte(raw), &members) != nil {
		return raw, "", false
	}
	var best json.RawMessage
	for name, v := range members {
		if len(v) > len(best) && v[0] == '"' {
			best, field = v, name
		}
	}
	if field == "" || 2*len(best) < len(raw) { // its JSON is not half of the result's
		return raw, "", false
	}
	if json.Unmarshal(best, &s) != nil {
		return raw, "", false
	}
	return s, field, false
}

// without is the object raw without its member field, if raw is an
// object.
func without(raw json.RawMessage, field string) (json.RawMessage, bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return nil, false
	}
	delete(members, field)
	return marshalNoHTML(members), true
}

// cutNote tells the model what it was shown of a cut result and how to
// read the rest.
func cutNote(total, head, tail int, isString bool, field, callID string, page int) string {
	unit := "bytes of its JSON text"
	switch {
	case isString:
		unit = "bytes of the text"
	case field != "":
		unit = fmt.Sprintf("bytes of the text of its member %q", field)
	}
	args, _ := json.Marshal(struct {
		CallID string `json:"call_id"`
		Offset int    `json:"offset"`
	}{callID, head})
	return fmt.Sprintf("[agrun: this tool result is %d bytes, too long to show whole; shown are %s 0-%d and %d-%d. "+
		"The full result is kept: call %s with %s to read on (up to %d bytes per call).]",
		total, unit, head, tail, total, PageToolName, args, page)
}

// runeFloor is the largest rune boundary of s not after n.
func runeFloor(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	if n <= 0 {
		return 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// runeCeil is the smallest rune boundary of s not before n.
func runeCeil(s string, n int) int {
	if n <= 0 {
		return 0
	}
	for n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return min(n, len(s))
}

func marshalNoHTML(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// fullResult is the whole text of the tool message answering callID, as
// the page tool reads it: FullContent when the message was cut, else its
// Content (a result left out of a request is whole in the history).
// What is paged is pageable's: a string decoded, an object that is mostly
// one text member that member's text (field names it). ok is false when
// no tool message answers callID.
func (c *Cycle) fullResult(callID string) (text, field string, ok bool) {
	c.mu.Lock()
	var m *Message
	for i := len(c.history) - 1; i >= 0; i-- {
		if h := &c.history[i]; h.Role == RoleTool && h.ToolCallID == callID {
			m = h
			break
		}
	}
	var raw string
	if m != nil {
		raw = m.Content
		if m.FullContent != "" {
			raw = m.FullContent
		}
	}
	c.mu.Unlock()
	if m == nil {
		return "", "", false
	}
	text, field, _ = pageable(raw)
	return text, field, true
}

// page answers one call of the page tool: the JSON result, or a tool
// error's kind and message.
func (c *Cycle) page(args string, limit int) (json.RawMessage, registry.Kind, string) {
	var a struct {
		CallID string `json:"call_id"`
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(args)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, registry.InvalidArguments, "want {\"call_id\": \"...\", \"offset\": N, \"length\": N}: " + err.Error()
	}
	if a.CallID == "" {
		return nil, registry.InvalidArguments, "call_id is required"
	}
	text, field, ok := c.fullResult(a.CallID)
	if !ok {
		return nil, registry.NotFound, "no tool result with call_id " + strconv.Quote(textsafe.Truncate(a.CallID, 100)) + " in this conversation"
	}
	limitPage := pageMax(limit)
	off, n := int64(0), int64(limitPage)
	if a.Offset != nil {
		off = *a.Offset
	}
	if a.Length != nil {
		n = *a.Length
	}
	switch {
	case off < 0 || off > int64(len(text)):
		return nil, registry.InvalidArguments, fmt.Sprintf("offset %d is outside the result (0 to %d)", off, len(text))
	case n <= 0:
		return nil, registry.InvalidArguments, fmt.Sprintf("length %d must be positive", n)
	}
	n = min(n, int64(limitPage))
	start := runeFloor(text, int(off))
	end := runeFloor(text, int(min(int64(start)+n, int64(len(text)))))
	if end == start && start < len(text) { // a length shorter than one rune
		_, size := utf8.DecodeRuneInString(text[start:])
		end = start + size
	}
	var next *int
	if end < len(text) {
		next = &end
	}
	out := marshalNoHTML(struct {
		CallID     string `json:"call_id"`
		Field      string `json:"field,omitempty"`
		Offset     int    `json:"offset"`
		Length     int    `json:"length"`
		Total      int    `json:"total"`
		NextOffset *int   `json:"next_offset"`
		Text       string `json:"text"`
	}{a.CallID, field, start, end - start, len(text), next, text[start:end]})
	return out, "", ""
}

// hasCut reports whether a tool message of msgs was cut, so the page tool
// is worth offering.
func hasCut(msgs []Message) bool {
	for i := range msgs {
		if msgs[i].Role == RoleTool && msgs[i].FullContent != "" {
			return true
		}
	}
	return false
}
