package session

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agcore/agrun/internal/textsafe"
	"github.com/agcore/agrun/loop"
)

// WriteList writes infos as the table `agrun sessions` prints: ID, when
// last used (local time; "-" where the store does not know it), turns,
// model, tokens and the first line of the first prompt. Text from a
// model or a user is escaped (textsafe.Escape) and cut to fit its
// column.
func WriteList(w io.Writer, infos []Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAST USED\tTURNS\tMODEL\tTOKENS\tFIRST PROMPT")
	for _, in := range infos {
		used := "-" // not known in the cluster's store
		if !in.Updated.IsZero() {
			used = in.Updated.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", in.ID, used, in.Turns,
			textsafe.Escape(textsafe.Truncate(orDash(in.Model), 40)), in.Tokens, textsafe.Escape(textsafe.FirstLine(in.FirstPrompt, 60)))
	}
	return tw.Flush()
}

// WriteTranscript writes a session's records for a person to read, as
// `agrun sessions show` prints them: one line per message (WriteMessage)
// and per approval decision ("# approval: TOOL CALL_ID: ANSWER by WHO
// (REASON)"); requests and call records are not shown. A record that
// does not decode says so on its line.
func WriteTranscript(w io.Writer, recs []Record) {
	for _, r := range recs {
		if len(r.Message) != 0 {
			var m loop.Message
			if err := json.Unmarshal(r.Message, &m); err != nil {
				fmt.Fprintf(w, "[unreadable message: %v]\n", err)
			} else {
				WriteMessage(w, m)
			}
		}
		if len(r.Decision) != 0 {
			writeDecision(w, r.Decision)
		}
	}
}

// WriteMessage writes m on one line per part, for a person to read:
// "ROLE: text" (with " [interrupted]" when the reply was cut short),
// "ROLE: -> tool(arguments) [call id]" per tool call, and "[tool NAME
// ID] result" for a tool's result; long results and arguments are cut.
// Text is escaped (textsafe.Escape).
func WriteMessage(w io.Writer, m loop.Message) {
	safe := textsafe.Escape
	if m.Role == loop.RoleTool {
		fmt.Fprintf(w, "[tool %s %s] %s\n", safe(m.Name), safe(m.ToolCallID), safe(textsafe.Truncate(m.Content, 400)))
		return
	}
	if m.Content != "" {
		mark := ""
		if m.Interrupted {
			mark = " [interrupted]"
		}
		fmt.Fprintf(w, "%s: %s%s\n", safe(string(m.Role)), safe(m.Content), mark)
	}
	for _, tc := range m.ToolCalls {
		fmt.Fprintf(w, "%s: -> %s(%s) [%s]\n", safe(string(m.Role)), safe(tc.Name), safe(textsafe.Truncate(tc.Arguments, 200)), safe(tc.ID))
	}
}

// writeDecision writes a decision record (loop.DecisionRecord) on one
// line; one that does not decode is left out.
func writeDecision(w io.Writer, raw []byte) {
	var d loop.DecisionRecord
	if json.Unmarshal(raw, &d) != nil {
		return
	}
	line := fmt.Sprintf("# approval: %s %s: %s by %s", d.Tool, d.CallID, d.Answer, d.By)
	if d.Reason != "" {
		line += " (" + d.Reason + ")"
	}
	fmt.Fprintln(w, textsafe.EscapeLine(textsafe.Truncate(line, 500)))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteApprovals writes the standing approvals as the table `agrun
// approvals` prints: tool, when (local time), by whom, and the grant
// they were given for (registry.Grant.Summary), each escaped and kept on
// its line (textsafe.EscapeLine).
func WriteApprovals(w io.Writer, list []StandingApproval) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tAPPROVED\tBY\tGRANT")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", textsafe.EscapeLine(a.Tool), a.Time.Local().Format(time.DateTime),
			textsafe.EscapeLine(a.By), textsafe.EscapeLine(a.Grant.Summary()))
	}
	return tw.Flush()
}
