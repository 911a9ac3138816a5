package console

import (
	"fmt"
	"net/url"
	"time"

	"github.com/ctdispatch/ctdispatch/outbox"
)

// The geometry of the charts, in SVG user units.
const (
	chartWidth  = 960
	chartLeft   = 100 // room for the lane labels
	chartRight  = 48
	laneHeight  = 44
	chartTop    = 10
	chartAxis   = 28
	barsHeight  = 140
	tickCount   = 5
	maxBarWidth = 36
)

// timeline places a run's dispatches and timers on a time axis, one lane
// per kind: a dispatch is a line from when it was first recorded to its
// latest state, ending in a dot coloured by status; a timer is a line from
// when it was scheduled to its due time, where its dot sits. The page
// draws it as inline SVG, so it needs no script.
type timeline struct {
	Width, Height, Left, Right, AxisY, TickEnd int
	Lanes                                      []lane
	Ticks                                      []tick
	Marks                                      []mark
}

type lane struct {
	Label string
	Y     int
}

type tick struct {
	X     int
	Label string
}

type mark struct {
	X1, X2, Y int
	Class     string
	Title     string
	Href      string
}

var laneOrder = []string{"dispatch", "retry", "heartbeat"}

func newTimeline(recs []outbox.Record) *timeline {
	lanes := map[string]int{}
	var kinds []string
	for _, k := range laneOrder {
		for _, r := range recs {
			if r.Kind == k {
				lanes[k] = len(kinds)
				kinds = append(kinds, k)
				break
			}
		}
	}
	for _, r := range recs { // kinds this version does not know get a lane too
		if _, ok := lanes[r.Kind]; !ok {
			lanes[r.Kind] = len(kinds)
			kinds = append(kinds, r.Kind)
		}
	}
	var lo, hi time.Time
	for _, r := range recs {
		start, end := span(r)
		if lo.IsZero() || start.Before(lo) {
			lo = start
		}
		if end.After(hi) {
			hi = end
		}
	}
	if !hi.After(lo) {
		hi = lo.Add(time.Second)
	}
	tl := &timeline{Width: chartWidth, Left: chartLeft, Right: chartWidth - chartRight}
	tl.AxisY = chartTop + len(kinds)*laneHeight
	tl.TickEnd = tl.AxisY + 5
	tl.Height = tl.AxisY + chartAxis
	for i, k := range kinds {
		tl.Lanes = append(tl.Lanes, lane{Label: k, Y: chartTop + i*laneHeight + laneHeight/2})
	}
	x := func(t time.Time) int {
		return tl.Left + int(float64(tl.Right-tl.Left)*float64(t.Sub(lo))/float64(hi.Sub(lo)))
	}
	layout := "15:04:05"
	switch span := hi.Sub(lo); {
	case span > 24*time.Hour:
		layout = "01-02 15:04"
	case span < 10*time.Second:
		layout = "15:04:05.000"
	}
	for i := range tickCount {
		t := lo.Add(time.Duration(float64(hi.Sub(lo)) * float64(i) / float64(tickCount-1)))
		tl.Ticks = append(tl.Ticks, tick{X: x(t), Label: t.UTC().Format(layout)})
	}
	for i, r := range recs {
		start, end := span(r)
		// Spread marks of one lane over three rows so neighbours stay apart.
		y := chartTop + lanes[r.Kind]*laneHeight + laneHeight/2 + (i%3-1)*9
		title := fmt.Sprintf("%s: %s at %s", r.ID, r.Status, fmtTime(end))
		if !r.DueAt.IsZero() {
			title = fmt.Sprintf("%s: %s, due %s", r.ID, r.Status, fmtTime(r.DueAt))
		}
		tl.Marks = append(tl.Marks, mark{X1: x(start), X2: x(end), Y: y, Class: "st-" + string(r.Status), Title: title, Href: "/audit?q=" + url.QueryEscape(r.ID)})
	}
	return tl
}

// span is where a record's mark starts and ends on the axis.
func span(r outbox.Record) (time.Time, time.Time) {
	if !r.DueAt.IsZero() {
		return r.CreatedAt, r.DueAt
	}
	return r.CreatedAt, r.UpdatedAt
}

// outcomeChart stacks the count of IDs per status for each health sample.
type outcomeChart struct {
	Width, Height, Left, Right, AxisY int
	Bars                              []bar
	Ticks                             []tick
	Max                               int64
}

type bar struct {
	X, Y, W, H int
	Class      string
	Title      string
}

var statusOrder = []outbox.Status{outbox.StatusCreated, outbox.StatusAlreadyExisted, outbox.StatusPending, outbox.StatusFailed, outbox.StatusCancelled}

func newOutcomeChart(samples []sample) *outcomeChart {
	if len(samples) == 0 {
		return nil
	}
	c := &outcomeChart{Width: chartWidth, Left: chartLeft, Right: chartWidth - chartRight, AxisY: chartTop + barsHeight}
	c.Height = c.AxisY + chartAxis
	for _, s := range samples {
		var total int64
		for _, n := range s.ByStatus {
			total += n
		}
		c.Max = max(c.Max, total)
	}
	if c.Max == 0 {
		c.Max = 1
	}
	step := (c.Right - c.Left) / maxSamples
	w := min(maxBarWidth, step-2)
	for i, s := range samples {
		x := c.Left + i*step
		y := c.AxisY
		for _, st := range statusOrder {
			n := s.ByStatus[string(st)]
			if n == 0 {
				continue
			}
			h := max(1, int(float64(barsHeight)*float64(n)/float64(c.Max)))
			y -= h
			c.Bars = append(c.Bars, bar{X: x, Y: y, W: w, H: h, Class: "st-" + string(st),
				Title: fmt.Sprintf("%s: %d %s", fmtTime(s.At), n, st)})
		}
		if i == 0 || i == len(samples)-1 {
			c.Ticks = append(c.Ticks, tick{X: x + w/2, Label: s.At.UTC().Format("15:04:05")})
		}
	}
	return c
}
