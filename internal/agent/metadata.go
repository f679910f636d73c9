package agent

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// File metadata (envd 0.6.2): user-defined string pairs attached to a file
// at upload (X-Metadata-<key>: <value> request headers) and returned in
// every EntryInfo (stat, list, rename, watch events) and in the upload
// answer. They are kept where the file is, as extended attributes, so they
// follow the file through renames, snapshots and suspends with nothing to
// keep in step, and a process in the sandbox sees them too (getfattr).
//
// The namespace is envd's: key k is the xattr user.e2b.k. The user. class
// is the one unprivileged processes may write; e2b. keeps other tools'
// user.* attributes out of the metadata (they are neither shown nor
// touched).
const metadataXattrPrefix = "user.e2b."

// metadataHeaderPrefix introduces one metadata pair in an upload request.
const metadataHeaderPrefix = "X-Metadata-"

const (
	// maxMetadataKeyLen: Linux limits a whole xattr name to 255 bytes.
	maxMetadataKeyLen = 255 - len(metadataXattrPrefix)
	// maxMetadataBytes bounds one file's set (names with prefix plus
	// values). ext4 keeps all of an inode's xattrs in one block, so a larger
	// set could fail half-written; it is refused up front instead.
	maxMetadataBytes = 4096
)

// errXattrUnsupported marks a filesystem without user xattrs (procfs,
// sysfs, some FUSE mounts). Metadata cannot be kept there.
var errXattrUnsupported = errors.New("the filesystem does not support extended attributes")

// metadataFromHeaders collects the X-Metadata-* pairs of an upload, keys
// lowercased (HTTP header names are case-insensitive), the first value of a
// repeated header winning. It returns nil when there are none and an error
// for a set that could not be stored faithfully.
func metadataFromHeaders(h http.Header) (map[string]string, error) {
	var md map[string]string
	for name, values := range h {
		// net/http canonicalises names, so the prefix matches case-blind.
		if len(values) == 0 || !strings.HasPrefix(http.CanonicalHeaderKey(name), metadataHeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(metadataHeaderPrefix):])
		if key == "" {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = values[0]
	}
	return md, validateMetadata(md)
}

// validateMetadata enforces what the SDKs promise (printable US-ASCII keys
// and values) and what an xattr can hold.
func validateMetadata(md map[string]string) error {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(md)) {
		v := md[k]
		if len(k) > maxMetadataKeyLen {
			return fmt.Errorf("metadata key %q is longer than %d bytes", k, maxMetadataKeyLen)
		}
		if i := nonPrintableASCII(k); i >= 0 {
			return fmt.Errorf("metadata key %q holds a byte that is not printable US-ASCII at offset %d", k, i)
		}
		if i := nonPrintableASCII(v); i >= 0 {
			return fmt.Errorf("metadata value of key %q holds a byte that is not printable US-ASCII at offset %d", k, i)
		}
		total += len(metadataXattrPrefix) + len(k) + len(v)
	}
	if total > maxMetadataBytes {
		return fmt.Errorf("metadata takes %d bytes, more than the %d a file may carry", total, maxMetadataBytes)
	}
	return nil
}

func nonPrintableASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return i
		}
	}
	return -1
}

// replaceMetadata makes md the whole metadata set of the open file f:
// pairs of an earlier upload that md lacks are removed, because a truncating
// overwrite keeps the inode and with it the old xattrs. Attributes outside
// user.e2b. are left alone. It reports whether it changed anything, and
// returns errXattrUnsupported (wrapped) on a filesystem without xattrs;
// with an empty md that is no failure, as there is nothing to keep.
func replaceMetadata(f *os.File, md map[string]string) (changed bool, err error) {
	names, err := flistxattr(f)
	if err != nil {
		if isXattrUnsupported(err) {
			if len(md) == 0 {
				return false, nil
			}
			return false, fmt.Errorf("keep metadata of %s: %w", f.Name(), errXattrUnsupported)
		}
		return false, fmt.Errorf("list xattrs of %s: %w", f.Name(), err)
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok {
			continue
		}
		if _, keep := md[key]; keep {
			continue
		}
		if err := unix.Fremovexattr(int(f.Fd()), name); err != nil && !errors.Is(err, unix.ENODATA) {
			return true, fmt.Errorf("remove metadata %q of %s: %w", key, f.Name(), err)
		}
		changed = true
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		changed = true
		if err := unix.Fsetxattr(int(f.Fd()), metadataXattrPrefix+k, []byte(md[k]), 0); err != nil {
			if isXattrUnsupported(err) {
				return changed, fmt.Errorf("keep metadata of %s: %w", f.Name(), errXattrUnsupported)
			}
			return changed, fmt.Errorf("set metadata %q of %s: %w", k, f.Name(), err)
		}
	}
	return changed, nil
}

// readMetadata returns the metadata of path (following a final symlink,
// whose own xattrs Linux does not allow in the user class), nil when it
// has none or its filesystem keeps no xattrs. Pairs set from inside the
// sandbox with bytes that are not UTF-8 are skipped: a protobuf string
// must be UTF-8, and one bad pair must not break a whole listing.
func readMetadata(path string) map[string]string {
	names, err := listxattr(path)
	if err != nil || len(names) == 0 {
		return nil
	}
	var md map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok || key == "" || !utf8.ValidString(key) {
			continue
		}
		value, err := getxattr(path, name)
		if err != nil || !utf8.Valid(value) {
			continue // removed meanwhile, or not text
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(value)
	}
	return md
}

func isXattrUnsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// The xattr calls below size their buffer first and retry when the set grew
// between the two calls (ERANGE).

func listxattr(path string) ([]string, error) {
	return xattrNames(func(buf []byte) (int, error) { return unix.Listxattr(path, buf) })
}

func flistxattr(f *os.File) ([]string, error) {
	return xattrNames(func(buf []byte) (int, error) { return unix.Flistxattr(int(f.Fd()), buf) })
}

func xattrNames(list func([]byte) (int, error)) ([]string, error) {
	buf, err := sizedRead(list)
	if err != nil || len(buf) == 0 {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(buf), "\x00"), "\x00"), nil
}

func getxattr(path, name string) ([]byte, error) {
	return sizedRead(func(buf []byte) (int, error) { return unix.Getxattr(path, name, buf) })
}

func sizedRead(read func([]byte) (int, error)) ([]byte, error) {
	for range 4 {
		size, err := read(nil)
		if err != nil {
			return nil, err
		}
		if size == 0 {
			return nil, nil
		}
		buf := make([]byte, size)
		n, err := read(buf)
		if errors.Is(err, syscall.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, syscall.ERANGE
}
