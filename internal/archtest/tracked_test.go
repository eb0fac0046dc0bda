package archtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxTrackedSize is the largest file the repository may hold outside
// trackedAllowed: build outputs and data dumps belong elsewhere.
const maxTrackedSize = 1 << 20

// trackedAllowed are the tracked files that may be executable or larger
// than maxTrackedSize, each with the reason.
var trackedAllowed = map[string]string{
	".ci/run": "CI's entry point, a shell script run as a program",
}

// TestNoBuildOutputsTracked fails when git tracks an executable (a
// compiled binary, or a script not in trackedAllowed) or a file larger
// than maxTrackedSize: a committed binary once made up 93% of the
// repository's pack.
func TestNoBuildOutputsTracked(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-s", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, entry := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := strings.Cut(string(entry), "\t")
		if !ok {
			t.Fatalf("git ls-files: unexpected line %q", entry)
		}
		mode := strings.Fields(meta)[0]
		if _, allowed := trackedAllowed[path]; allowed {
			continue
		}
		if mode == "100755" {
			t.Errorf("%s is tracked as an executable: build outputs are not committed (add it to trackedAllowed, with the reason, if it must be)", path)
		}
		if mode == "120000" || mode == "160000" {
			continue // a symbolic link or a submodule: no content here
		}
		info, err := os.Stat(filepath.Join(root, path))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > maxTrackedSize {
			t.Errorf("%s is %d bytes, over the %d a tracked file may have (add it to trackedAllowed, with the reason, if it must be)", path, info.Size(), maxTrackedSize)
		}
		if isBinaryExecutable(filepath.Join(root, path)) {
			t.Errorf("%s is a compiled program: build outputs are not committed", path)
		}
	}
}

// isBinaryExecutable reports whether the file starts like a compiled
// program: ELF, Mach-O or PE.
func isBinaryExecutable(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := bufio.NewReader(f).Read(head)
	head = head[:n]
	for _, magic := range [][]byte{
		{0x7f, 'E', 'L', 'F'},
		{0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf}, // Mach-O
		{0xce, 0xfa, 0xed, 0xfe}, {0xcf, 0xfa, 0xed, 0xfe},
		{'M', 'Z'}, // PE
	} {
		if bytes.HasPrefix(head, magic) {
			return true
		}
	}
	return false
}

// moduleRoot is the folder holding go.mod, found from this package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above " + strconv.Quote(dir))
		}
		dir = parent
	}
}
