package registry

import "fmt"

// MountMode is what a call may do in a mounted directory: read
// ("ro"), also write ("rw"), also delete ("rwd"). Its text form is the
// MODE of a HOST:GUEST:MODE mount in agrun.toml, the approval question,
// `agrun audit` and the JSON of a Grant; MountModeOf and ParseMountMode
// are the one place it is made.
type MountMode uint8

// The mount modes.
const (
	ReadOnly        MountMode = iota // "ro"
	ReadWrite                        // "rw": create, write, rename inside
	ReadWriteDelete                  // "rwd": rw, and unlink and rmdir
)

var modeNames = [...]string{ReadOnly: "ro", ReadWrite: "rw", ReadWriteDelete: "rwd"}

// MountModeOf is the mode of a mount that may write and delete as said
// (delete implies write).
func MountModeOf(writable, allowDelete bool) MountMode {
	switch {
	case allowDelete:
		return ReadWriteDelete
	case writable:
		return ReadWrite
	}
	return ReadOnly
}

// ParseMountMode reads "ro", "rw" or "rwd".
func ParseMountMode(s string) (MountMode, error) {
	for m, name := range modeNames {
		if s == name {
			return MountMode(m), nil
		}
	}
	return ReadOnly, fmt.Errorf("mode must be ro, rw or rwd, not %q", s)
}

// String is "ro", "rw" or "rwd".
func (m MountMode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("MountMode(%d)", m)
}

// Writable reports whether the mode lets a call write (rw, rwd).
func (m MountMode) Writable() bool { return m >= ReadWrite }

// Delete reports whether the mode lets a call delete (rwd).
func (m MountMode) Delete() bool { return m == ReadWriteDelete }

// MarshalText gives the mode's text form.
func (m MountMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads the mode's text form.
func (m *MountMode) UnmarshalText(b []byte) error {
	v, err := ParseMountMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
