package httpapi

import (
	"math"
	"strconv"
	"strings"
)

// Charts of the console: inline SVG drawn on the server by the "chart"
// template (console/templates/chart.html), so they need no script and
// obey the console's Content-Security-Policy (they are styled by
// console.css classes, never by style attributes). Each chart is a
// role="img" with an accessible name and description, and every point or
// bar carries a <title> with its exact value; the pages show the same
// numbers in tables too.

// Geometry of a chart, in SVG user units (the chart scales to its box).
const (
	chartWidth  = 360.0 // a line chart's; a bar chart's is its caller's
	chartHeight = 170.0
	plotLeft    = 46.0
	plotMarginR = 10.0
	plotTop     = 14.0
	plotBottom  = 138.0
)

// svgChart is one chart as the "chart" template draws it: coordinates are
// computed here, labels and titles are text (the template escapes them).
type svgChart struct {
	// ID is unique on the page; the chart's title and description are
	// ID-title and ID-desc.
	ID string
	// Label names the chart (its <title> and accessible name); Desc says
	// what it shows and its scale.
	Label, Desc string
	Width       float64
	Height      float64
	Left, Right float64
	Top, Bottom float64
	// YTicks are the horizontal grid lines with their labels; XTicks the
	// labels under the plot.
	YTicks, XTicks []svgTick
	Series         []svgSeries
	Bars           []svgBar
	Legend         []svgLegend
	// Empty, when set, is written across a chart that has no data.
	Empty string
}

// svgTick is an axis label at (X, Y); a y tick has its grid line at Y.
type svgTick struct {
	X, Y  float64
	Label string
}

// svgSeries is one line of a line chart: polylines (broken where a slot
// has no value) and a dot with a <title> per value.
type svgSeries struct {
	Class string
	Lines []string
	Dots  []svgDot
}

// svgDot is one value of a series.
type svgDot struct {
	X, Y  float64
	Title string
}

// svgBar is one bar of a bar chart.
type svgBar struct {
	X, Y, W, H float64
	Title      string
}

// svgLegend is a series' key: a short line of its class from X1 to X2 at
// Y, and its name at TextX.
type svgLegend struct {
	X1, X2, Y, TextX float64
	Class            string
	Name             string
}

// chartSeries is the data of one line: a value (or nil) per slot, and the
// title of each slot's dot.
type chartSeries struct {
	Name   string
	Class  string
	Values []*float64
	Titles []string
}

// newChart is a chart frame width wide with its y axis from 0 to yMax,
// ticks at 0, half and full (yFmt labels them), and xLabels under the
// slots that have one (slots are evenly spaced, labels "" are skipped).
func newChart(id, label, desc string, width, yMax float64, yFmt func(float64) string, xLabels []string) svgChart {
	c := svgChart{ID: id, Label: label, Desc: desc, Width: width, Height: chartHeight,
		Left: plotLeft, Right: width - plotMarginR, Top: plotTop, Bottom: plotBottom}
	for _, v := range []float64{0, yMax / 2, yMax} {
		c.YTicks = append(c.YTicks, svgTick{X: c.Left - 6, Y: c.y(v, yMax), Label: yFmt(v)})
	}
	for i, l := range xLabels {
		if l != "" {
			c.XTicks = append(c.XTicks, svgTick{X: c.x(i, len(xLabels)), Y: c.Bottom + 16, Label: l})
		}
	}
	return c
}

// MidX and MidY are the centre of the plot, where Empty is written.
func (c svgChart) MidX() float64 { return round1((c.Left + c.Right) / 2) }

// MidY: see MidX.
func (c svgChart) MidY() float64 { return round1((c.Top + c.Bottom) / 2) }

// x is the centre of slot i of n.
func (c svgChart) x(i, n int) float64 {
	return round1(c.Left + (float64(i)+0.5)*(c.Right-c.Left)/float64(n))
}

// y is the height of v on a 0..yMax axis (clamped to the plot).
func (c svgChart) y(v, yMax float64) float64 {
	if yMax <= 0 {
		return c.Bottom
	}
	f := math.Max(0, math.Min(1, v/yMax))
	return round1(c.Bottom - f*(c.Bottom-c.Top))
}

// lineChart draws series over the same slots on a 0..yMax axis.
func lineChart(id, label, desc string, yMax float64, yFmt func(float64) string, xLabels []string, series ...chartSeries) svgChart {
	c := newChart(id, label, desc, chartWidth, yMax, yFmt, xLabels)
	hasData := false
	for si, s := range series {
		out := svgSeries{Class: s.Class}
		var line []string
		flush := func() {
			if len(line) > 1 {
				out.Lines = append(out.Lines, strings.Join(line, " "))
			}
			line = nil
		}
		for i, v := range s.Values {
			if v == nil {
				flush()
				continue
			}
			hasData = true
			x, y := c.x(i, len(s.Values)), c.y(*v, yMax)
			line = append(line, num(x)+","+num(y))
			out.Dots = append(out.Dots, svgDot{X: x, Y: y, Title: s.Titles[i]})
		}
		flush()
		c.Series = append(c.Series, out)
		if len(series) > 1 {
			x := c.Right - 64*float64(len(series)-si)
			c.Legend = append(c.Legend, svgLegend{X1: x, X2: x + 14, Y: 6, TextX: x + 18, Class: s.Class, Name: s.Name})
		}
	}
	if !hasData {
		c.Empty = "No data in this period"
	}
	return c
}

// barChart draws one bar per slot on a 0..yMax axis, width wide.
func barChart(id, label, desc string, width, yMax float64, yFmt func(float64) string, xLabels []string, values []float64, titles []string) svgChart {
	c := newChart(id, label, desc, width, yMax, yFmt, xLabels)
	slot := (c.Right - c.Left) / float64(len(values))
	w := round1(math.Max(1, slot*0.7))
	for i, v := range values {
		if v <= 0 {
			continue
		}
		y := c.y(v, yMax)
		c.Bars = append(c.Bars, svgBar{X: round1(c.x(i, len(values)) - w/2), Y: y, W: w, H: round1(c.Bottom - y), Title: titles[i]})
	}
	if len(c.Bars) == 0 {
		c.Empty = "Nothing in this period"
	}
	return c
}

// niceCeil is the smallest of 1, 2, 2.5, 5 times a power of ten that is at
// least v (v > 0); 1 for anything else.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// round1 rounds to a tenth of a unit: SVG coordinates need no more.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// num writes a coordinate.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// formatShare writes a share (0..1) as a percentage with one decimal,
// dropped when it is 0.
func formatShare(v float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(v*100, 'f', 1, 64), ".0") + "\u00a0%"
}

// formatShareP is formatShare of a share that may be missing.
func formatShareP(v *float64) string {
	if v == nil {
		return "—"
	}
	return formatShare(*v)
}

// formatMS writes a latency in milliseconds: whole from 10 ms, with up to
// two decimals below.
func formatMS(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	if v < 10 {
		s = strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
	}
	return s + "\u00a0ms"
}

// formatMSP is formatMS of a latency that may be missing.
func formatMSP(v *float64) string {
	if v == nil {
		return "—"
	}
	return formatMS(*v)
}

// formatCount writes a whole number on an axis.
func formatCount(v float64) string {
	if v != math.Trunc(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// formatBP is formatShare of a rate in basis points (9512 is 95.1 %);
// nil is "—".
func formatBP(bp *int) string {
	if bp == nil {
		return "—"
	}
	return formatShare(float64(*bp) / 10000)
}
