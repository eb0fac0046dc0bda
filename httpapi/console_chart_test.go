package httpapi

import (
	"bytes"
	"strings"
	"testing"
)

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.003, 0.005}, {0.05, 0.05}, {0.26, 0.5}, {1, 1}, {3, 5}, {7, 10}, {12, 20}, {21, 25}, {480, 500}, {2001, 2500},
	} {
		if got := niceCeil(tc.in); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestChartFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{formatShare(1), "100\u00a0%"}, {formatShare(0), "0\u00a0%"}, {formatShare(2.0 / 3), "66.7\u00a0%"},
		{formatShare(0.025), "2.5\u00a0%"}, {formatShareP(nil), "—"},
		{formatMS(1.25), "1.25\u00a0ms"}, {formatMS(2), "2\u00a0ms"}, {formatMS(2.104), "2.1\u00a0ms"}, {formatMS(480.4), "480\u00a0ms"},
		{formatMSP(nil), "—"}, {formatCount(2), "2"}, {formatCount(2.5), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestLineChartBreaksAtGapsAndEscapesText(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	c := lineChart("c0-rate", `<script>alert("x")</script> & co`, "desc", 1, formatShare, []string{"00:00", "", "", ""},
		chartSeries{Name: "rate", Class: "s-rate", Values: []*float64{f(0), f(1), nil, f(0.5)},
			Titles: []string{"a", "b", "c", `<b>d</b>`}})
	if len(c.Series) != 1 || len(c.Series[0].Dots) != 3 {
		t.Fatalf("series %+v", c.Series)
	}
	// Slots are 76 units wide from x = 46; 0 is at y = 138, 1 at y = 14.
	if got := c.Series[0].Lines; len(got) != 1 || got[0] != "84,138 160,14" {
		t.Fatalf("lines %q, want one from the first two points (the last stands alone)", got)
	}
	if len(c.XTicks) != 1 || c.XTicks[0].X != 84 || len(c.YTicks) != 3 || c.YTicks[1].Label != "50\u00a0%" || c.YTicks[1].Y != 76 {
		t.Fatalf("ticks %+v %+v", c.XTicks, c.YTicks)
	}
	var buf bytes.Buffer
	if err := parseConsolePages()["connectors"].ExecuteTemplate(&buf, "chart", c); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`role="img"`, `aria-labelledby="c0-rate-title c0-rate-desc"`,
		`<title id="c0-rate-title">&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co</title>`,
		`<polyline points="84,138 160,14"></polyline>`, `<title>&lt;b&gt;d&lt;/b&gt;</title>`} {
		if !strings.Contains(out, want) {
			t.Errorf("chart lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "<script>") || strings.Contains(out, "style=") {
		t.Fatalf("chart has a script or an inline style:\n%s", out)
	}
	empty := lineChart("c1", "l", "d", 1, formatShare, make([]string, 3), chartSeries{Values: make([]*float64, 3), Titles: make([]string, 3)})
	if empty.Empty == "" || len(empty.Series[0].Dots) != 0 {
		t.Fatalf("a chart without values: %+v", empty)
	}
}
