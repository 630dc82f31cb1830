// Package sandboxfs is the file system agrun's WebAssembly sandbox serves to
// guests for host directory mounts.
//
//	fsys, err := sandboxfs.New("/srv/data", sandboxfs.Options{Writable: true})
//	if err != nil { ... }
//	defer fsys.(io.Closer).Close() // after the module that uses it is closed
//	cfg := wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(fsys, "/data")
//
// # Threat
//
// The guest is untrusted code that wants to read or change host files it was
// not given, or to make the host do so later. wazero's own directory mounts
// (WithDirMount, WithReadOnlyDirMount) join guest paths onto the host path
// and let the kernel resolve them, so a symlink inside the mount — placed
// there by the host, or by the guest itself on a writable mount — leads
// anywhere on the host, read-only mounts included.
//
// # Design
//
// [New] opens the host directory as an [os.Root] and implements wazero's
// experimental/sys FS and File interfaces on top of it. os.Root resolves every
// path component itself, relative to a directory descriptor, and refuses any
// component or symlink (absolute, or relative with "..") that would leave the
// root. Because resolution is descriptor-relative and done per operation, a
// directory swapped for a symlink while the guest runs is caught too: the
// next operation sees the symlink and refuses it. Open files are plain
// descriptors; moving them around on the host does not widen access.
//
// On top of that, policy the kernel cannot know:
//
//   - A read-only mount ([Options.Writable] false) refuses every change —
//     create (O_CREAT), O_TRUNC, opening for writing, write, rename, unlink,
//     mkdir, rmdir, truncate/ftruncate, utimes/futimes, chmod, symlink, link —
//     with EROFS. Reads, stat, readdir and readlink work.
//   - A writable mount without [Options.AllowDelete] refuses unlink and rmdir
//     with EPERM, and also a rename that would replace an existing entry
//     (that deletes the old one).
//   - Symlinks the guest creates must have a relative target without any ".."
//     component (EPERM otherwise). os.Root would never follow an escaping
//     link for the guest anyway; the rule protects the host's other readers —
//     the operator's shell, backup jobs, other tools whose mounts are
//     subdirectories of this one — which follow links naively. A target that
//     only descends stays inside whatever directory holds the link, even after
//     the guest renames the link or its parents.
//   - Hard links: os.Root keeps both names inside the mount. Linking a
//     symlink is refused (EPERM): the copy would sit at another depth, where a
//     relative target may point somewhere else. For the same reason renaming
//     a symlink whose target is absolute or contains ".." is refused.
//   - A regular file with more than one link may also be a file outside the
//     mount (a hard link the host made), so it is never changed: opening it
//     for writing or with O_TRUNC, truncating it, and changing its times or
//     mode fail with EPERM (the check is on the open descriptor, so it
//     cannot be raced; path utimes and chmod look before they act). Reading,
//     renaming and unlinking the name work. A file the guest linked itself
//     is treated the same until one of its names is removed.
//   - Only regular files and directories can be opened (EACCES otherwise);
//     opens use O_NONBLOCK so a FIFO placed in the mount cannot stall the host
//     thread. Created files and directories get permission bits only (no
//     setuid/setgid/sticky); chmod likewise.
//   - At most [Options.MaxOpenFiles] files are open at once per FS (EAGAIN
//     beyond); at most [Options.MaxWriteBytes] bytes are written over the
//     FS's life, or over the life of all FSes sharing one
//     [Options.WriteCounter] (EIO beyond). wazero can only pass WASI preview 1's errno
//     set through its Errno type, which lacks EMFILE and ENOSPC (anything
//     else, a full host disk included, reaches the guest as EIO).
//
// Paths are relative to the mount (a leading "/" means its root). A ".."
// that would leave the mount is refused with EPERM, as are symlinks that
// would (os.Root's "path escapes from parent"); wazero itself already
// refuses ".." above a mount point with EPERM.
//
// # Not defended
//
//   - Hard links the host already has inside the mount to files outside it:
//     the guest may read them (it cannot change them, see above). A link the
//     host adds after the guest opened the file for writing is not noticed.
//     Do not mount trees that contain such links.
//   - Symlinks the host placed inside the mount with ".." in their target:
//     the guest cannot follow them out, but renaming a directory that
//     contains one (rename of the link itself is refused) changes where the
//     link points for host-side readers. Do not mount such trees writable.
//   - Bind mounts and other file system boundaries inside the mount are
//     crossed (os.Root does not prohibit them). Special files inside it can
//     be stat'ed and listed, though not opened.
//   - Disk usage beyond bytes written: inodes (many empty files or
//     directories) are not capped, and sparse holes made by writing at a large
//     offset take no budget (they take no disk blocks either).
//   - Policy checks that look before they act (replace-on-rename without
//     AllowDelete, link of a symlink, O_NOFOLLOW) can race with another
//     process changing the same directory at the same moment; the race can
//     never leave the mount, only pick a different entry inside it.
//   - chmod is not reachable from WASI preview 1 guests; it is implemented for
//     completeness and honours the same rules.
//
// # Concurrency
//
// An FS and its files are safe for concurrent use. Each FS holds one
// directory descriptor until Close; files opened from it are independent of
// that and are closed by wazero when the module closes.
package sandboxfs
