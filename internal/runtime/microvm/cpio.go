package microvm

import (
	"fmt"
	"io"
)

// cpioWriter writes the "newc" cpio format, the one the Linux kernel
// unpacks as an initramfs: a 110-byte ASCII header per entry, the name
// and the data each padded to four bytes, and a TRAILER!!! entry at the
// end. Only what an initramfs needs is supported: directories, regular
// files, symlinks and device nodes, all owned by root.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	off int64
	err error
}

// cpio mode bits (the file type part of st_mode).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

func newCPIOWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm uint32) {
	c.entry(name, cpioDir|perm, 2, 0, 0, nil)
}

// File adds a regular file holding data.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, cpioFile|perm, 1, 0, 0, data)
}

// Symlink adds a symbolic link name → target.
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, cpioSymlink|0o777, 1, 0, 0, []byte(target))
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm uint32, major, minor uint32) {
	c.entry(name, cpioCharDev|perm, 1, major, minor, nil)
}

// Close writes the trailer; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	c.ino = 0
	c.entry("TRAILER!!!", 0, 1, 0, 0, nil)
	return c.err
}

func (c *cpioWriter) entry(name string, mode, nlink, rmajor, rminor uint32, data []byte) {
	if c.err != nil {
		return
	}
	if name != "TRAILER!!!" {
		c.ino++
	}
	// Fields: magic, ino, mode, uid, gid, nlink, mtime, filesize,
	// devmajor, devminor, rdevmajor, rdevminor, namesize (with its NUL),
	// check. mtime 0 keeps the archive a function of its content only.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil || len(b) == 0 {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}
