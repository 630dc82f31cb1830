package sandboxfs_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"

	"github.com/agcore/agrun/runtime/internal/sandboxfs"
)

// Mount a host directory read-only at /data for a guest. Changes fail with
// EROFS and symlinks out of the directory are refused.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "mount")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))

	fsys, err := sandboxfs.New(dir, sandboxfs.Options{})
	if err != nil {
		panic(err)
	}
	defer fsys.(io.Closer).Close() // after the module is closed

	// What the runtime does with it:
	_ = wazero.NewModuleConfig().WithFSConfig(
		wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, "/data"))

	st, errno := fsys.Stat("notes.txt")
	fmt.Println(st.Size, errno == 0)
	fmt.Println(fsys.Mkdir("new", 0o755))
	_, errno = fsys.Stat("passwd")
	fmt.Println(errno)
	// Output:
	// 2 true
	// read-only file system
	// operation not permitted
}
