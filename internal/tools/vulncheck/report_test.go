package main

import (
	"bytes"
	"strings"
	"testing"
)

// Lines of govulncheck -format json output (protocol v1.0.0), shaped as
// govulncheck@v1.9.0 writes them.
const (
	configLine = `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck","scanner_version":"v1.9.0","db":"file:///cache/payorch-vulndb/v0","db_last_modified":"2026-11-05T23:49:57Z","go_version":"go1.26.8","scan_level":"symbol","scan_mode":"source"}}`
	progress   = `{"progress":{"message":"Scanning your code and 312 packages across 58 dependent modules for known vulnerabilities..."}}`

	stdlibOSV     = `{"osv":{"schema_version":"1.3.1","id":"GO-2026-6617","modified":"0001-01-01T00:00:00Z","summary":"HTTP/2 server crash in net/http","affected":[]}}`
	stdlibModule  = `{"finding":{"osv":"GO-2026-6617","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8"}]}}`
	stdlibPackage = `{"finding":{"osv":"GO-2026-6617","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http"}]}}`
	stdlibCalled  = `{"finding":{"osv":"GO-2026-6617","fixed_version":"v1.26.9","trace":[` +
		`{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"ServeTLS","receiver":"*Server"},` +
		`{"module":"github.com/payorch/payorch","package":"github.com/payorch/payorch/httpapi","function":"Serve","position":{"filename":"/src/httpapi/server.go","offset":9000,"line":311,"column":31}}]}}`

	echoOSV    = `{"osv":{"schema_version":"1.3.1","id":"GO-2026-6872","modified":"0001-01-01T00:00:00Z","summary":"Rate limiter bypass in github.com/labstack/echo","affected":[]}}`
	echoCalled = `{"finding":{"osv":"GO-2026-6872","trace":[` +
		`{"module":"github.com/labstack/echo/v4","version":"v4.16.5","package":"github.com/labstack/echo/v4","function":"New"},` +
		`{"module":"github.com/payorch/payorch","package":"github.com/payorch/payorch/httpapi","function":"New","position":{"filename":"/src/httpapi/server.go","line":130}}]}}`

	netOSV      = `{"osv":{"schema_version":"1.3.1","id":"GO-2026-7000","modified":"0001-01-01T00:00:00Z","summary":"x/net html tokenizer","affected":[]}}`
	netImported = `{"finding":{"osv":"GO-2026-7000","fixed_version":"v0.63.0","trace":[{"module":"golang.org/x/net","version":"v0.62.0","package":"golang.org/x/net/html"}]}}`
)

func stream(lines ...string) *strings.Reader {
	return strings.NewReader(strings.Join(lines, "\n") + "\n")
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		lines   []string
		failing bool
		report  []string // lines the printed report must hold
	}{
		"ReachableWithAFixFails": {
			// govulncheck writes module, then package, then symbol
			// findings for the same entry; the deepest one counts.
			lines:   []string{configLine, progress, stdlibOSV, stdlibModule, stdlibPackage, stdlibCalled},
			failing: true,
			report: []string{
				"GO-2026-6617  stdlib@go1.26.8, fixed in go1.26.9: HTTP/2 server crash in net/http",
				"httpapi/server.go:311: httpapi.Serve -> http.Server.ServeTLS",
				"vulncheck: 1 reachable with a fix, 0 reachable without a fix; not called: 0 in imported packages, 0 in required modules",
			},
		},
		"ShortestCallPathIsShown": {
			lines: []string{configLine, echoOSV, strings.Replace(echoCalled, `"function":"New"}`,
				`"function":"Group"},{"module":"github.com/payorch/payorch","package":"github.com/payorch/payorch/httpapi","function":"routes"}`, 1), echoCalled},
			report: []string{"httpapi.New -> echo.New\n"},
		},
		"DeepestFindingCountsWhateverTheOrder": {
			lines:   []string{configLine, stdlibOSV, stdlibCalled, stdlibPackage, stdlibModule},
			failing: true,
			report:  []string{"httpapi.Serve -> http.Server.ServeTLS"},
		},
		"ReachableWithoutAFixIsReportedButPasses": {
			lines:   []string{configLine, echoOSV, echoCalled},
			failing: false,
			report: []string{
				"Reachable, no fixed version yet (reported; they do not fail the check):",
				"GO-2026-6872  github.com/labstack/echo/v4@v4.16.5, no fix: Rate limiter bypass",
				"httpapi.New -> echo.New",
			},
		},
		"ImportedOrRequiredOnlyPasses": {
			lines:   []string{configLine, netOSV, netImported, stdlibOSV, stdlibModule},
			failing: false,
			report: []string{
				"GO-2026-7000  golang.org/x/net@v0.62.0, package imported: x/net html tokenizer",
				"GO-2026-6617  stdlib@go1.26.8, module required: HTTP/2 server crash in net/http",
				"vulncheck: 0 reachable with a fix, 0 reachable without a fix; not called: 1 in imported packages, 1 in required modules",
			},
		},
		"NothingFound": {
			lines:   []string{configLine, progress},
			failing: false,
			report:  []string{"vulncheck: govulncheck@v1.9.0, Go go1.26.8, database last modified 2026-11-05"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := readFindings(stream(tc.lines...))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.failing(); got != tc.failing {
				t.Errorf("failing() = %v, want %v", got, tc.failing)
			}
			var out bytes.Buffer
			res.print(&out)
			for _, want := range tc.report {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestReadFindingsRefusesWhatIsNotASymbolScan(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		input   string
		wantErr string
	}{
		"NoConfig":        {input: stdlibCalled + "\n", wantErr: "no config message"},
		"TextOutput":      {input: "=== Symbol Results ===\n", wantErr: "invalid character"},
		"PackageLevelRun": {input: strings.Replace(configLine, `"symbol"`, `"package"`, 1) + "\n", wantErr: `scan level "package"`},
		"Empty":           {input: "", wantErr: "no config message"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readFindings(strings.NewReader(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readFindings error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
