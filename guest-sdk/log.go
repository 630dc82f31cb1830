package guest

import "fmt"

// Level is the severity of a [Log] message.
type Level int32

// The log levels of agrun.log.
const (
	LevelDebug Level = 0
	LevelInfo  Level = 1
	LevelWarn  Level = 2
	LevelError Level = 3
)

// maxLogMessage is the host's cap on one message; longer ones are cut here
// so that no more than that crosses the boundary.
const maxLogMessage = 4 << 10

// Log writes msg to the host's log at the given level, through agrun.log.
// It is not part of the tool's result: the model does not see it. The host
// truncates messages over 4 KiB and drops what exceeds 256 KiB per call.
// In a host build it writes "[level] msg" to stderr.
func Log(level Level, msg string) {
	if len(msg) > maxLogMessage {
		msg = msg[:maxLogMessage]
	}
	hostLog(level, msg)
}

// Logf is Log with fmt.Sprintf formatting.
func Logf(level Level, format string, args ...any) {
	Log(level, fmt.Sprintf(format, args...))
}

// String returns "debug", "info", "warn", "error", or the number.
func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarn:
		return "warn"
	case LevelError:
		return "error"
	}
	return fmt.Sprintf("level(%d)", int32(l))
}
