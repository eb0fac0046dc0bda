package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// osvFixtures are OSV entries in x/vulndb's data/osv shape: no
// modification time (zero) except where one is given.
var osvFixtures = map[string]string{
	// Fixed on two branches: the later fix is the one that fixes all.
	"GO-2099-0001": `{"schema_version":"1.3.1","id":"GO-2099-0001","modified":"0001-01-01T00:00:00Z",
		"aliases":["CVE-2099-1"],"summary":"two branches",
		"affected":[{"package":{"name":"example.com/a","ecosystem":"Go"},
			"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.2.0"},{"introduced":"1.3.0"},{"fixed":"1.3.5"}]}]}]}`,
	// Introduced again after its last fix: nothing fixes it for good.
	"GO-2099-0002": `{"schema_version":"1.3.1","id":"GO-2099-0002","modified":"0001-01-01T00:00:00Z",
		"affected":[{"package":{"name":"example.com/a","ecosystem":"Go"},
			"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.1.0"},{"introduced":"1.4.0"}]}]}]}`,
	// Two modules, one without a fix; modified after the snapshot.
	"GO-2099-0003": `{"schema_version":"1.3.1","id":"GO-2099-0003","modified":"2099-01-02T03:04:05Z",
		"aliases":["CVE-2099-3","GHSA-xxxx-yyyy-zzzz"],
		"affected":[{"package":{"name":"stdlib","ecosystem":"Go"},
				"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.26.9"},{"introduced":"1.27.0-0"},{"fixed":"1.27.2"}]}]},
			{"package":{"name":"example.com/b","ecosystem":"Go"},
				"ranges":[{"type":"SEMVER","events":[{"introduced":"0"}]}]}]}`,
}

func writeOSV(t *testing.T, entries map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for id, body := range entries {
		if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestBuildDB(t *testing.T) {
	t.Parallel()
	osvDir, out := writeOSV(t, osvFixtures), t.TempDir()
	snapshot := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC)
	n, err := buildDB(osvDir, out, snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("buildDB counted %d entries, want 3", n)
	}

	t.Run("ModulesIndexHasTheFixThatFixesEveryRange", func(t *testing.T) {
		var got []moduleMeta
		readJSON(t, filepath.Join(out, "index", "modules.json"), &got)
		zero, later := time.Time{}, time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)
		want := []moduleMeta{
			{Path: "example.com/a", Vulns: []moduleVuln{{ID: "GO-2099-0001", Modified: zero, Fixed: "1.3.5"}, {ID: "GO-2099-0002", Modified: zero}}},
			{Path: "example.com/b", Vulns: []moduleVuln{{ID: "GO-2099-0003", Modified: later}}},
			{Path: "stdlib", Vulns: []moduleVuln{{ID: "GO-2099-0003", Modified: later, Fixed: "1.27.2"}}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("modules.json = %+v\nwant %+v", got, want)
		}
	})
	t.Run("VulnsIndexListsIDsAndAliases", func(t *testing.T) {
		var got []vulnMeta
		readJSON(t, filepath.Join(out, "index", "vulns.json"), &got)
		var ids, aliases []string
		for _, v := range got {
			ids = append(ids, v.ID)
			aliases = append(aliases, v.Aliases...)
		}
		if want := []string{"GO-2099-0001", "GO-2099-0002", "GO-2099-0003"}; !reflect.DeepEqual(ids, want) {
			t.Errorf("vulns.json ids = %v, want %v", ids, want)
		}
		if want := []string{"CVE-2099-1", "CVE-2099-3", "GHSA-xxxx-yyyy-zzzz"}; !reflect.DeepEqual(aliases, want) {
			t.Errorf("vulns.json aliases = %v, want %v", aliases, want)
		}
	})
	t.Run("DBModifiedIsTheNewestEntryOrTheSnapshot", func(t *testing.T) {
		var got dbMeta
		readJSON(t, filepath.Join(out, "index", "db.json"), &got)
		if want := time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC); !got.Modified.Equal(want) {
			t.Errorf("db.json modified = %v, want the newest entry's %v", got.Modified, want)
		}
		out2 := t.TempDir()
		if _, err := buildDB(writeOSV(t, map[string]string{"GO-2099-0001": osvFixtures["GO-2099-0001"]}), out2, snapshot); err != nil {
			t.Fatal(err)
		}
		readJSON(t, filepath.Join(out2, "index", "db.json"), &got)
		if !got.Modified.Equal(snapshot) {
			t.Errorf("db.json modified = %v, want the snapshot's %v", got.Modified, snapshot)
		}
	})
	t.Run("EntriesAreCopiedByteForByte", func(t *testing.T) {
		for id, body := range osvFixtures {
			got, err := os.ReadFile(filepath.Join(out, "ID", id+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, []byte(body)) {
				t.Errorf("ID/%s.json differs from the OSV file", id)
			}
		}
	})
}

func TestBuildDBRefusesWhatWouldPassEveryScan(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		entries map[string]string
		wantErr string
	}{
		"EmptyFolder":          {entries: nil, wantErr: "no OSV entries"},
		"FileNameIsNotTheID":   {entries: map[string]string{"GO-2099-0009": osvFixtures["GO-2099-0001"]}, wantErr: "does not match"},
		"FileIsNotOSVJSON":     {entries: map[string]string{"GO-2099-0001": `<html>`}, wantErr: "GO-2099-0001.json"},
		"EntryWithoutAnyIDSet": {entries: map[string]string{"GO-2099-0001": `{"summary":"x"}`}, wantErr: "does not match"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := buildDB(writeOSV(t, tc.entries), t.TempDir(), time.Time{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("buildDB error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestEnsureDBBuildsOncePerVersion(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	osvDir := writeOSV(t, osvFixtures)
	downloads := 0
	download := func() (string, error) { downloads++; return osvDir, nil }
	foreign := filepath.Join(cache, "not-ours")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}

	const v1, v2 = "v0.0.0-20261105234957-e22db6528018", "v0.0.0-20261201000000-000000000000"
	dir1, err := ensureDB(cache, v1, download)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir1, "index", "modules.json")); err != nil {
		t.Fatalf("no index after the first build: %v", err)
	}
	if again, err := ensureDB(cache, v1, download); err != nil || again != dir1 || downloads != 1 {
		t.Errorf("second ensureDB of the same version: dir %q err %v downloads %d, want %q, nil, 1 (reused)", again, err, downloads, dir1)
	}
	dir2, err := ensureDB(cache, v2, download)
	if err != nil || downloads != 2 {
		t.Fatalf("ensureDB of a new version: err %v downloads %d, want a build", err, downloads)
	}
	if _, err := os.Stat(dir1); !os.IsNotExist(err) {
		t.Errorf("the old version's database is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, sourceFile)); err != nil {
		t.Errorf("the new version's database has no %s: %v", sourceFile, err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a folder that is not a database was removed: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".build-*"))
	if len(left) > 0 {
		t.Errorf("build folders left behind: %v", left)
	}
	if _, err := ensureDB(cache, "../escape", download); err == nil {
		t.Error("ensureDB took a version that is a path")
	}
}

func TestSnapshotTimeIsThePseudoVersionsCommitTime(t *testing.T) {
	t.Parallel()
	got := snapshotTime("v0.0.0-20261105234957-e22db6528018")
	if want := time.Date(2026, 11, 5, 23, 49, 57, 0, time.UTC); !got.Equal(want) {
		t.Errorf("snapshotTime = %v, want %v", got, want)
	}
	if got := snapshotTime("v1.2.3"); !got.IsZero() {
		t.Errorf("snapshotTime of a release = %v, want zero", got)
	}
}
