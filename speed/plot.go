package speed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sfsurgery/sfsurgery/checkpoint"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ErrPlotFormat is wrapped when a plot file's extension is neither .png
// nor .svg.
var ErrPlotFormat = errors.New("speed: plot format must be .png or .svg")

// Panel size and grid of the plot.
const (
	panelWidth  = 3.4 * vg.Inch
	panelHeight = 2.6 * vg.Inch
	titleHeight = 0.5 * vg.Inch
	maxCols     = 4
)

// lineStyle is how a sparse backend is drawn.
type lineStyle struct {
	label string
	color color.Color
	shape draw.GlyphDrawer
}

// backendStyle returns the style of a sparse backend.
func backendStyle(backend string) lineStyle {
	if backend == CuSPARSELt {
		return lineStyle{"cuSPARSELt", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.TriangleGlyph{}}
	}
	return lineStyle{"ours (mma.sp)", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}}
}

// WritePlotFile writes the speedup-vs-M picture of rep to path, as PNG or
// SVG by the file's extension, atomically (checkpoint.WriteBytes): path
// holds its old contents or the whole picture, never a part.
func WritePlotFile(path string, rep *Report) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "png" && format != "svg" {
		return fmt.Errorf("%w: %s", ErrPlotFormat, path)
	}
	var b bytes.Buffer
	if err := WritePlot(&b, format, rep); err != nil {
		return err
	}
	if err := checkpoint.WriteBytes(context.Background(), path, b.Bytes(), &checkpoint.WriteOptions{Force: true}); err != nil {
		return fmt.Errorf("speed: plot: %w", err)
	}
	return nil
}

// WritePlot draws, for each shape of rep, the speedup of every sparse
// backend over dense against M (log scale), with the break-even line at
// 1.0 and the math ceiling at 2.0, one panel per shape, and writes the
// picture to w as "png" or "svg".
func WritePlot(w io.Writer, format string, rep *Report) error {
	shapes := rep.Shapes
	if len(shapes) == 0 {
		return fmt.Errorf("speed: plot: the report has no shapes")
	}
	cols := min(maxCols, len(shapes))
	rows := (len(shapes) + cols - 1) / cols
	width, height := panelWidth*vg.Length(cols), panelHeight*vg.Length(rows)+titleHeight
	var canvas vg.CanvasWriterTo
	switch format {
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))}
	case "svg":
		canvas = vgsvg.New(width, height)
	default:
		return fmt.Errorf("%w: %q", ErrPlotFormat, format)
	}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, s := range shapes {
		p, err := panel(rep, s)
		if err != nil {
			return err
		}
		grid[i/cols][i%cols] = p
	}
	dc := draw.New(canvas)
	title := fmt.Sprintf("2:4 sparse / dense cuBLASLt, %s %s", rep.Env.GPU, rep.DType)
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 12), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YTop}
	dc.FillText(sty, vg.Point{X: width / 2, Y: height - 0.12*vg.Inch}, title)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadTop: titleHeight, PadX: 0.2 * vg.Inch, PadY: 0.2 * vg.Inch,
		PadLeft: 0.1 * vg.Inch, PadRight: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch}
	cells := plot.Align(grid, tiles, dc)
	for j := range grid {
		for i, p := range grid[j] {
			if p != nil {
				p.Draw(cells[j][i])
			}
		}
	}
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("speed: plot: %w", err)
	}
	return nil
}

// panel draws one shape.
func panel(rep *Report, s Shape) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = s.Label()
	p.Title.TextStyle.Font.Size = 10
	p.X.Label.Text = "M (tokens)"
	p.Y.Label.Text = "speedup over dense"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = mTicks(rep.Ms)
	lo, hi := 1.0, 2.0
	if len(rep.Ms) > 0 {
		lo, hi = float64(slices.Min(rep.Ms)), float64(slices.Max(rep.Ms))
	}
	p.X.Min, p.X.Max = lo/1.5, hi*1.5
	p.Y.Min, p.Y.Max = 0, 2.7
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = 7
	p.Add(plotter.NewGrid())
	for _, ref := range []struct {
		y     float64
		label string
		dash  []vg.Length
		col   color.Color
	}{
		{1, "break-even", []vg.Length{vg.Points(4), vg.Points(3)}, color.Black},
		{2, "2x math ceiling", []vg.Length{vg.Points(1), vg.Points(2)}, color.Gray{Y: 0x80}},
	} {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: ref.y}, {X: p.X.Max, Y: ref.y}})
		if err != nil {
			return nil, fmt.Errorf("speed: plot: %w", err)
		}
		l.Dashes, l.Color = ref.dash, ref.col
		p.Add(l)
		if ref.y == 1 {
			p.Legend.Add(ref.label, l)
		}
	}
	for _, b := range []string{Ours, CuSPARSELt} {
		var xys plotter.XYs
		for _, r := range rep.Rows {
			if r.shapeKey() == (shapeKey{s.Model, s.N, s.K}) && r.Backend == b && r.Timed() && r.Speedup > 0 {
				xys = append(xys, plotter.XY{X: float64(r.M), Y: r.Speedup})
				p.Y.Max = math.Max(p.Y.Max, r.Speedup*1.1)
			}
		}
		if len(xys) == 0 {
			continue
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		line, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("speed: plot: %w", err)
		}
		st := backendStyle(b)
		line.Color, pts.Color, pts.Shape = st.color, st.color, st.shape
		line.Width = vg.Points(1.5)
		p.Add(line, pts)
		p.Legend.Add(st.label, line, pts)
	}
	p.Y.Tick.Marker = yTicks(p.Y.Max)
	return p, nil
}

// yTicks labels speedups every 0.5 up to top.
func yTicks(top float64) plot.ConstantTicks {
	var t plot.ConstantTicks
	for v := 0.0; v <= top; v += 0.5 {
		t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 1, 64)})
	}
	return t
}

// mTicks labels the measured token counts, multiples of 1024 as "4k".
func mTicks(ms []int) plot.ConstantTicks {
	var t plot.ConstantTicks
	for _, m := range ms {
		label := strconv.Itoa(m)
		if m >= 1024 && m%1024 == 0 {
			label = strconv.Itoa(m/1024) + "k"
		}
		t = append(t, plot.Tick{Value: float64(m), Label: label})
	}
	return t
}
