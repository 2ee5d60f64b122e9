//! A small plot model and its renderers (SVG for the HTML report, PNG for files).
//!
//! Every figure nines draws is first built as a [`Plot`]: plain data (series, bands, shaded
//! spans, axes with their ticks) that tests inspect directly. [`render_svg`] and [`render_png`]
//! turn it into pictures with the `plotters` crate. PNG text uses plotters' `ttf` feature, which
//! finds fonts through fontconfig (Debian: `libfontconfig1-dev fonts-dejavu-core`); SVG text is
//! left to the browser.

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

use crate::axis::Axis;

#[derive(Debug, Error)]
pub enum PlotError {
    #[error("drawing the plot failed: {0}")]
    Draw(String),
    #[error("encoding the PNG failed: {0}")]
    Encode(String),
    /// Writing the file failed (disk full, permission): the OS's own words.
    #[error("{0}")]
    Write(#[from] std::io::Error),
}

/// An RGB colour.
pub type Rgb = [u8; 3];

/// A readable categorical palette (Tableau 10), cycled for more series.
pub const PALETTE: [Rgb; 10] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
];

/// `#RRGGBB`, the way the SVG backend writes colours.
pub fn hex(c: Rgb) -> String {
    format!("#{:02X}{:02X}{:02X}", c[0], c[1], c[2])
}

pub fn palette(i: usize) -> Rgb {
    PALETTE[i % PALETTE.len()]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesStyle {
    Line,
    Points,
    LinePoints,
}

/// One named set of (x, y) points in data units.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub style: SeriesStyle,
    pub color: Rgb,
    pub points: Vec<(f64, f64)>,
    /// Text drawn next to the series' last point (used to name outlying devices).
    pub end_label: Option<String>,
    /// Drawn thicker (emphasis); thin lines otherwise.
    pub bold: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, style: SeriesStyle, color: Rgb) -> Series {
        Series {
            name: name.into(),
            style,
            color,
            points: Vec::new(),
            end_label: None,
            bold: false,
        }
    }
}

/// A filled area between a low and a high curve: (x, low, high).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    pub name: String,
    pub color: Rgb,
    pub points: Vec<(f64, f64, f64)>,
}

/// A shaded vertical span of x (e.g. a detected latency spike).
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub x_start: f64,
    pub x_end: f64,
    pub color: Rgb,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    pub spans: Vec<Span>,
    /// Draw a legend of series (and band) names; off for many series.
    pub legend: bool,
}

impl Plot {
    pub fn new(title: impl Into<String>, x: Axis, y: Axis) -> Plot {
        Plot {
            title: title.into(),
            x,
            y,
            series: Vec::new(),
            bands: Vec::new(),
            spans: Vec::new(),
            legend: true,
        }
    }
}

pub const DEFAULT_SIZE: (u32, u32) = (960, 540);

/// The plot as a standalone SVG document.
pub fn render_svg(plot: &Plot, size: (u32, u32)) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        draw(&root, plot).map_err(|e| PlotError::Draw(e.to_string()))?;
        root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
    }
    Ok(out)
}

/// The plot as PNG bytes.
pub fn render_png_bytes(plot: &Plot, size: (u32, u32)) -> Result<Vec<u8>, PlotError> {
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        draw(&root, plot).map_err(|e| PlotError::Draw(e.to_string()))?;
        root.present().map_err(|e| PlotError::Draw(e.to_string()))?;
    }
    let mut png = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new(&mut png),
        &rgb,
        size.0,
        size.1,
        image::ColorType::Rgb8,
    )
    .map_err(|e| PlotError::Encode(e.to_string()))?;
    Ok(png)
}

/// A linear coordinate whose ticks are exactly the ones the [`Axis`] computed (plotters' own
/// key-point combinator cannot take a label formatter for f64 ranges).
struct TickedCoord {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl Ranged for TickedCoord {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let frac = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn rgb(c: Rgb) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

/// Clamp a drawing coordinate into the axis' range so that off-scale points sit on the edge.
fn clamp(v: f64, (lo, hi): (f64, f64)) -> f64 {
    v.clamp(lo, hi)
}

/// What a legend entry's sample looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegendKind {
    Line,
    Points,
    Band,
}

/// One entry of a figure's legend.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    pub name: String,
    pub color: Rgb,
    pub kind: LegendKind,
}

/// A series' points in drawing coordinates, split where a point cannot be drawn (a non-finite
/// value, or one <= 0 on a log axis): a line never joins across such a point, so a gap in the
/// data (NaN) stays a gap. Off-scale points are clamped to the frame.
fn drawable_runs(plot: &Plot, points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let (xr, yr) = (plot.x.coord_range(), plot.y.coord_range());
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur = Vec::new();
    for &(x, y) in points {
        match (plot.x.to_coord(x), plot.y.to_coord(y)) {
            (Some(x), Some(y)) => cur.push((clamp(x, xr), clamp(y, yr))),
            _ => {
                if !cur.is_empty() {
                    runs.push(std::mem::take(&mut cur));
                }
            }
        }
    }
    if !cur.is_empty() {
        runs.push(cur);
    }
    runs
}

/// A band's polygons: one per run of drawable points (a NaN low or high splits the band).
fn band_polygons(plot: &Plot, band: &Band) -> Vec<Vec<(f64, f64)>> {
    let (xr, yr) = (plot.x.coord_range(), plot.y.coord_range());
    let mut out = Vec::new();
    let mut cur: Vec<(f64, f64, f64)> = Vec::new();
    // A lone point (a max after a break) is a narrow bar from low to high.
    let half_w = (xr.1 - xr.0) / 300.0;
    let mut flush = |cur: &mut Vec<(f64, f64, f64)>| {
        if let [(x, lo, hi)] = cur[..] {
            out.push(vec![
                (x - half_w, lo),
                (x + half_w, lo),
                (x + half_w, hi),
                (x - half_w, hi),
            ]);
        } else if cur.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = cur.iter().map(|p| (p.0, p.1)).collect();
            poly.extend(cur.iter().rev().map(|p| (p.0, p.2)));
            out.push(poly);
        }
        cur.clear();
    };
    for &(x, lo, hi) in &band.points {
        match (plot.x.to_coord(x), plot.y.to_coord(lo), plot.y.to_coord(hi)) {
            (Some(x), Some(lo), Some(hi)) => {
                cur.push((clamp(x, xr), clamp(lo, yr), clamp(hi, yr)));
            }
            _ => flush(&mut cur),
        }
    }
    flush(&mut cur);
    out
}

/// The legend of a figure: the bands and series that are drawn and can be seen. A series with
/// no drawable point is left out, and so is a point series every one of whose points lies
/// under the points of series drawn after it (cells of about 4 px), since a reader could not
/// find it.
pub fn legend_entries(plot: &Plot) -> Vec<LegendEntry> {
    if !plot.legend {
        return Vec::new();
    }
    let mut out: Vec<LegendEntry> = plot
        .bands
        .iter()
        .filter(|b| !band_polygons(plot, b).is_empty())
        .map(|b| LegendEntry {
            name: b.name.clone(),
            color: b.color,
            kind: LegendKind::Band,
        })
        .collect();
    let (xr, yr) = (plot.x.coord_range(), plot.y.coord_range());
    let cell = |(x, y): (f64, f64)| -> (i32, i32) {
        (
            ((x - xr.0) / (xr.1 - xr.0) * 220.0) as i32,
            ((y - yr.0) / (yr.1 - yr.0) * 120.0) as i32,
        )
    };
    let cells: Vec<std::collections::HashSet<(i32, i32)>> = plot
        .series
        .iter()
        .map(|s| {
            if s.style == SeriesStyle::Points {
                drawable_runs(plot, &s.points)
                    .into_iter()
                    .flatten()
                    .map(cell)
                    .collect()
            } else {
                Default::default()
            }
        })
        .collect();
    // A line drawn exactly under a later one (every point within 1%) is not an entry of its
    // own, which a reader could not find: the later, visible line's entry names both
    // ("mean = fastest device").
    let hidden_under: Vec<Option<usize>> = (0..plot.series.len())
        .map(|i| {
            (i + 1..plot.series.len())
                .find(|&j| {
                    coincide(&plot.series[i], &plot.series[j])
                        || coincide_drawn(plot, &plot.series[i], &plot.series[j])
                })
                .filter(|_| plot.series[i].style != SeriesStyle::Points)
        })
        .collect();
    for (i, s) in plot.series.iter().enumerate() {
        if drawable_runs(plot, &s.points).is_empty() || hidden_under[i].is_some() {
            continue;
        }
        if s.style == SeriesStyle::Points
            && cells[i]
                .iter()
                .all(|c| cells[i + 1..].iter().any(|later| later.contains(c)))
        {
            continue;
        }
        // Every line hidden under this one, transitively, in drawing order.
        let mut names: Vec<&str> = Vec::new();
        for (k, under) in hidden_under.iter().enumerate() {
            let mut at = *under;
            while let Some(j) = at {
                if j == i {
                    names.push(&plot.series[k].name);
                    break;
                }
                at = hidden_under[j];
            }
        }
        names.push(&s.name);
        out.push(LegendEntry {
            name: names.join(" = "),
            color: s.color,
            kind: match s.style {
                SeriesStyle::Points => LegendKind::Points,
                SeriesStyle::Line | SeriesStyle::LinePoints => LegendKind::Line,
            },
        });
    }
    out
}

/// Whether two line series draw the same line: the same x values and every y within 1% (as
/// `run::same_curves` groups device curves), gaps (NaN) at the same places.
fn coincide(a: &Series, b: &Series) -> bool {
    a.style != SeriesStyle::Points
        && b.style != SeriesStyle::Points
        && a.points.len() == b.points.len()
        && !a.points.is_empty()
        && a.points.iter().zip(&b.points).all(|(p, q)| {
            p.0 == q.0
                && ((p.1.is_nan() && q.1.is_nan())
                    || (p.1 - q.1).abs() <= 0.01 * p.1.abs().max(q.1.abs()))
        })
}

/// Whether two line series draw lines a reader cannot tell apart: the same number of drawable
/// points, each within about 2 px of its counterpart on a plot of ordinary size (0.4% of the x
/// axis and 0.6% of the y axis, in the axes' own scale, logarithmic or not). Eight files'
/// near-identical percentile curves differ by more than `coincide`'s 1% somewhere in the tail
/// and yet drew one line with four legend entries a reader could not find.
fn coincide_drawn(plot: &Plot, a: &Series, b: &Series) -> bool {
    if a.style == SeriesStyle::Points || b.style == SeriesStyle::Points {
        return false;
    }
    let (xr, yr) = (plot.x.coord_range(), plot.y.coord_range());
    let (dx_max, dy_max) = (0.004 * (xr.1 - xr.0).abs(), 0.006 * (yr.1 - yr.0).abs());
    let (ra, rb) = (
        drawable_runs(plot, &a.points),
        drawable_runs(plot, &b.points),
    );
    ra.len() == rb.len()
        && !ra.is_empty()
        && ra.iter().zip(&rb).all(|(p, q)| {
            p.len() == q.len()
                && p.iter()
                    .zip(q)
                    .all(|(u, v)| (u.0 - v.0).abs() <= dx_max && (u.1 - v.1).abs() <= dy_max)
        })
}

/// Left edge of the plotting area (margin plus the y label area), where the legend starts.
const PLOT_LEFT_PX: i32 = 12 + 78;
const LEGEND_ROW_PX: i32 = 18;
const LEGEND_CHAR_PX: i32 = 8;

/// Where each legend entry goes in a strip `width` pixels wide, and the strip's height.
fn legend_layout(entries: &[LegendEntry], width: u32) -> (Vec<(i32, i32)>, u32) {
    if entries.is_empty() {
        return (Vec::new(), 0);
    }
    let right = width as i32 - 12;
    let (mut x, mut y) = (PLOT_LEFT_PX, 4);
    let mut at = Vec::with_capacity(entries.len());
    for e in entries {
        // Sample, gap, text (8 px a character at 12 px: digits and `#` are 7.6 px in DejaVu
        // Sans, and browsers' sans-serif may be wider; at 7, "#0 ... #63 (24 devices)" ran into
        // the next entry), space before the next.
        let w = 18 + 6 + LEGEND_CHAR_PX * e.name.chars().count() as i32 + 18;
        if x + w > right && x > PLOT_LEFT_PX {
            x = PLOT_LEFT_PX;
            y += LEGEND_ROW_PX;
        }
        at.push((x, y));
        x += w;
    }
    (at, (y + LEGEND_ROW_PX + 4) as u32)
}

/// The chart of a plot: its axes and grid on the drawing area above the legend.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TickedCoord, TickedCoord>>;
type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plot: &Plot) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    // The legend is a strip under the figure, never over the data.
    let entries = legend_entries(plot);
    let (w, h) = root.dim_in_pixel();
    let (at, legend_h) = legend_layout(&entries, w);
    let legend_h = legend_h.min(h / 3);
    let (area, strip) = root.split_vertically(h - legend_h);
    let mut chart = chart_with_mesh(&area, plot)?;
    draw_spans(&mut chart, plot)?;
    for band in &plot.bands {
        let color = rgb(band.color);
        for poly in band_polygons(plot, band) {
            chart.draw_series(std::iter::once(Polygon::new(poly, color.mix(0.25))))?;
        }
    }
    for s in &plot.series {
        draw_series(&mut chart, plot, s)?;
    }
    draw_legend(&strip, &entries, &at, legend_h)
}

/// The chart's coordinates (the axes' ticks as its keys), title, margins and grid.
fn chart_with_mesh<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    plot: &Plot,
) -> Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let xr = plot.x.coord_range();
    let yr = plot.y.coord_range();
    let x_keys: Vec<f64> = plot
        .x
        .ticks
        .iter()
        .filter_map(|t| plot.x.to_coord(t.value))
        .collect();
    let y_keys: Vec<f64> = plot
        .y
        .ticks
        .iter()
        .filter_map(|t| plot.y.to_coord(t.value))
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&plot.title, ("sans-serif", 20))
        .margin(12)
        .margin_right(
            // Room for the longest end label (about 7 px a character at 12 px).
            plot.series
                .iter()
                .filter_map(|s| s.end_label.as_ref())
                .map(|l| 10 + 7 * l.chars().count() as u32)
                .max()
                .unwrap_or(20)
                .clamp(20, 200),
        )
        .x_label_area_size(44)
        .y_label_area_size(78)
        .build_cartesian_2d(
            TickedCoord {
                lo: xr.0,
                hi: xr.1,
                keys: x_keys,
            },
            TickedCoord {
                lo: yr.0,
                hi: yr.1,
                keys: y_keys,
            },
        )?;
    let x_label = |v: &f64| tick_label(&plot.x, *v);
    let y_label = |v: &f64| tick_label(&plot.y, *v);
    chart
        .configure_mesh()
        .x_desc(plot.x.label.as_str())
        .y_desc(plot.y.label.as_str())
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;
    Ok(chart)
}

/// The shaded spans (spikes), each at least a couple of pixels wide.
fn draw_spans<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, plot: &Plot) -> DrawResult<DB> {
    let xr = plot.x.coord_range();
    let yr = plot.y.coord_range();
    for s in &plot.spans {
        let (Some(a), Some(b)) = (plot.x.to_coord(s.x_start), plot.x.to_coord(s.x_end)) else {
            continue;
        };
        // At least a couple of pixels wide so that a short spike stays visible.
        let min_w = (xr.1 - xr.0) / 400.0;
        let (a, b) = if b - a < min_w {
            (a - min_w / 2.0, b + min_w / 2.0)
        } else {
            (a, b)
        };
        chart.draw_series(std::iter::once(Rectangle::new(
            [(clamp(a, xr), yr.0), (clamp(b, xr), yr.1)],
            rgb(s.color).mix(0.18).filled(),
        )))?;
    }
    Ok(())
}

/// One series: its lines and markers in its style, and its end label.
fn draw_series<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    plot: &Plot,
    s: &Series,
) -> DrawResult<DB> {
    let runs = drawable_runs(plot, &s.points);
    if runs.is_empty() {
        return Ok(());
    }
    let color = rgb(s.color);
    let width = if s.bold { 3 } else { 1 };
    let line_style = color.stroke_width(width);
    match s.style {
        SeriesStyle::Line | SeriesStyle::LinePoints => {
            if s.style == SeriesStyle::LinePoints {
                chart.draw_series(
                    runs.iter()
                        .flatten()
                        .map(|&p| Circle::new(p, 3, color.filled()))
                        .collect::<Vec<_>>(),
                )?;
            }
            // A lone point (max after a break) is a marker, not a line of one point.
            for run in &runs {
                if run.len() >= 2 {
                    chart.draw_series(LineSeries::new(run.iter().copied(), line_style))?;
                } else if s.style == SeriesStyle::Line {
                    chart.draw_series(run.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
            }
        }
        SeriesStyle::Points => {
            let n: usize = runs.iter().map(Vec::len).sum();
            chart.draw_series(
                runs.iter()
                    .flatten()
                    // Few points (a sweep's categories) get big markers; a cloud gets dots.
                    .map(|&p| Circle::new(p, if n <= 50 { 5 } else { 2 }, color.filled()))
                    .collect::<Vec<_>>(),
            )?;
        }
    }
    if let (Some(label), Some(&last)) = (&s.end_label, runs.last().and_then(|r| r.last())) {
        // A few pixels right of and above the last point, clear of its marker.
        let font = ("sans-serif", 12).into_font().color(&color);
        chart.draw_series(std::iter::once(
            EmptyElement::at(last) + Text::new(label.clone(), (6, -14), font),
        ))?;
    }
    Ok(())
}

/// The legend strip: each entry's sample and name where [`legend_layout`] put it, the rows that
/// do not fit in `legend_h` left out.
fn draw_legend<DB: DrawingBackend>(
    strip: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    at: &[(i32, i32)],
    legend_h: u32,
) -> DrawResult<DB> {
    assert_eq!(entries.len(), at.len(), "legend_layout places every entry");
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    for (e, &(x, y)) in entries.iter().zip(at) {
        if y as u32 + LEGEND_ROW_PX as u32 > legend_h {
            break;
        }
        let color = rgb(e.color);
        let mid = y + LEGEND_ROW_PX / 2;
        match e.kind {
            LegendKind::Line => strip.draw(&PathElement::new(
                vec![(x, mid), (x + 18, mid)],
                color.stroke_width(2),
            ))?,
            LegendKind::Points => strip.draw(&Circle::new((x + 9, mid), 4, color.filled()))?,
            LegendKind::Band => strip.draw(&Rectangle::new(
                [(x, mid - 5), (x + 18, mid + 5)],
                color.mix(0.25).filled(),
            ))?,
        }
        strip.draw(&Text::new(e.name.clone(), (x + 24, mid - 7), font.clone()))?;
    }
    Ok(())
}

/// The label of the tick nearest to drawing coordinate `v` (plotters asks by coordinate).
fn tick_label(axis: &Axis, v: f64) -> String {
    let (lo, hi) = axis.coord_range();
    let eps = (hi - lo).abs() * 1e-6;
    axis.ticks
        .iter()
        .find(|t| {
            axis.to_coord(t.value)
                .is_some_and(|c| (c - v).abs() <= eps.max(1e-12))
        })
        .map(|t| t.label.clone())
        .unwrap_or_default()
}

/// What the structure tests look for in an SVG: counts of drawn elements and all text.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SvgSummary {
    pub polylines: usize,
    /// The stroke colour of every polyline, as `#RRGGBB` (axes and grid lines included).
    pub polyline_strokes: Vec<String>,
    pub polygons: usize,
    pub circles: usize,
    pub rects: usize,
    pub texts: Vec<String>,
}

/// Count the elements of an SVG produced by [`render_svg`]; used by tests and sanity checks.
pub fn inspect_svg(svg: &str) -> SvgSummary {
    let mut s = SvgSummary {
        polylines: svg.matches("<polyline").count(),
        polyline_strokes: svg
            .split("<polyline")
            .skip(1)
            .filter_map(|e| {
                let i = e.find("stroke=\"")? + 8;
                let j = e[i..].find('"')?;
                Some(e[i..i + j].to_uppercase())
            })
            .collect(),
        polygons: svg.matches("<polygon").count(),
        circles: svg.matches("<circle").count(),
        rects: svg.matches("<rect").count(),
        texts: Vec::new(),
    };
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let Some(gt) = rest.find('>') else { break };
        let Some(end) = rest.find("</text>") else {
            break;
        };
        if gt < end {
            s.texts.push(unescape(rest[gt + 1..end].trim()));
        }
        rest = &rest[end + 7..];
    }
    s
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::axis::LabelFormat;

    fn sample() -> Plot {
        let x = Axis::nines("percentile", 50.0, 99.999, true);
        let y = Axis::log("latency", 1_000.0, 900_000.0, LabelFormat::Nanoseconds);
        let mut p = Plot::new("Read latency", x, y);
        for d in 0..3 {
            let mut s = Series::new(format!("dev{d}"), SeriesStyle::LinePoints, palette(d));
            for (i, v) in [0.3, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().enumerate() {
                s.points
                    .push((*v, 2_000.0 * (1.0 + i as f64 * (d + 1) as f64)));
            }
            p.series.push(s);
        }
        p.series[2].end_label = Some("dev2".into());
        p
    }

    #[test]
    fn svg_has_one_polyline_per_series_and_tick_labels() {
        let p = sample();
        let svg = render_svg(&p, DEFAULT_SIZE).unwrap();
        let s = inspect_svg(&svg);
        // Each series: its line plus the legend's sample line.
        for d in 0..3 {
            let n = s
                .polyline_strokes
                .iter()
                .filter(|c| **c == hex(palette(d)))
                .count();
            assert_eq!(n, 2, "{s:?}");
        }
        assert_eq!(s.circles, 21);
        for l in [
            "99.9",
            "99.999",
            "max",
            "1 µs",
            "1 ms",
            "Read latency",
            "percentile",
        ] {
            assert!(s.texts.iter().any(|t| t == l), "missing {l}: {:?}", s.texts);
        }
        assert!(s.texts.iter().filter(|t| *t == "dev2").count() >= 2);
    }

    #[test]
    fn empty_and_off_scale_data_still_render() {
        let mut p = sample();
        p.series[0].points = vec![(1.0, 0.0), (2.0, f64::NAN)];
        p.series[1].points.push((1.0, 1e15));
        p.bands.push(Band {
            name: "spread".into(),
            color: palette(4),
            points: vec![(1.0, 1e3, 1e4), (2.0, 2e3, 3e4)],
        });
        p.spans.push(Span {
            x_start: 1.0,
            x_end: 1.0,
            color: [255, 0, 0],
        });
        let s = inspect_svg(&render_svg(&p, DEFAULT_SIZE).unwrap());
        assert_eq!(s.polygons, 1);
        // The series with no drawable points is skipped; the others keep line and legend.
        let count = |d| {
            s.polyline_strokes
                .iter()
                .filter(|c| **c == hex(palette(d)))
                .count()
        };
        assert_eq!((count(0), count(1), count(2)), (0, 2, 2), "{s:?}");
    }

    #[test]
    fn lines_break_at_nan_and_the_legend_lists_only_what_shows() {
        let x = Axis::linear("t", 0.0, 10.0, LabelFormat::Seconds);
        let y = Axis::log("latency", 1e3, 1e6, LabelFormat::Nanoseconds);
        let mut p = Plot::new("t", x, y);
        let mut line = Series::new("p50", SeriesStyle::Line, palette(0));
        line.points = vec![
            (1.0, 2e3),
            (2.0, 3e3),
            (3.0, f64::NAN),
            (7.0, 2e3),
            (8.0, 4e3),
        ];
        let mut hidden = Series::new("under", SeriesStyle::Points, palette(2));
        hidden.points = vec![(5.0, 5e4), (6.0, 6e4)];
        let mut over = Series::new("over", SeriesStyle::Points, palette(4));
        over.points = vec![(5.0, 5e4), (6.0, 6e4), (9.0, 9e4)];
        let mut nothing = Series::new("nothing", SeriesStyle::Line, palette(5));
        nothing.points = vec![(1.0, 0.0)];
        p.series = vec![line, hidden, over, nothing];
        p.bands.push(Band {
            name: "band".into(),
            color: palette(7),
            points: vec![
                (1.0, 1e3, 1e4),
                (2.0, 1e3, 1e4),
                (3.0, f64::NAN, f64::NAN),
                (7.0, 1e3, 1e4),
                (8.0, 1e3, 1e4),
            ],
        });
        let names: Vec<String> = legend_entries(&p).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["band", "p50", "over"]);
        let s = inspect_svg(&render_svg(&p, DEFAULT_SIZE).unwrap());
        // Two runs of the line plus its legend sample; two band polygons.
        let n = s
            .polyline_strokes
            .iter()
            .filter(|c| **c == hex(palette(0)))
            .count();
        assert_eq!(n, 3, "{s:?}");
        assert_eq!(s.polygons, 2);
        assert!(s.texts.iter().any(|t| t == "over"));
        assert!(!s.texts.iter().any(|t| t == "under" || t == "nothing"));
    }

    #[test]
    fn a_line_drawn_under_another_shares_its_legend_entry() {
        // The spread figure of identical devices drew "fastest device" and "slowest device"
        // exactly under "mean": three entries, two of which showed nothing.
        let x = Axis::linear("p", 0.0, 4.0, LabelFormat::Plain);
        let y = Axis::log("latency", 1e3, 1e6, LabelFormat::Nanoseconds);
        let mut p = Plot::new("t", x, y);
        let line = |name: &str, c: usize, ys: [f64; 3]| {
            let mut s = Series::new(name, SeriesStyle::Line, palette(c));
            s.points = vec![(1.0, ys[0]), (2.0, ys[1]), (3.0, ys[2])];
            s
        };
        p.series = vec![
            line("mean", 0, [2e3, 3e3, 4e3]),
            line("fastest", 2, [2e3, 3e3, 4.01e3]),
            line("slowest", 3, [2e3, 3e3, 4e3]),
            line("other", 4, [2e3, 3e3, 9e3]),
        ];
        let names: Vec<String> = legend_entries(&p).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["mean = fastest = slowest", "other"]);
        // Each entry left is a line of its own colour in the picture.
        let svg = inspect_svg(&render_svg(&p, DEFAULT_SIZE).unwrap());
        for e in legend_entries(&p) {
            assert!(svg.texts.contains(&e.name), "{e:?}");
            assert!(svg.polyline_strokes.contains(&hex(e.color)), "{e:?}");
        }
    }

    #[test]
    fn near_identical_lines_share_a_legend_entry_and_visible_gaps_do_not() {
        // Eight files' percentile curves: equal at the median, apart by more than 1% in the
        // tail yet by less than 0.6% of a log axis spanning three decades (under 2 px).
        let x = Axis::nines("percentile", 50.0, 99.999, true);
        let y = Axis::log("latency", 1e3, 1e6, LabelFormat::Nanoseconds);
        let mut p = Plot::new("t", x, y);
        let line = |name: &str, c: usize, tail: f64| {
            let mut s = Series::new(name, SeriesStyle::Line, palette(c));
            s.points = vec![(0.3, 2e3), (2.0, 5e3), (4.0, tail)];
            s
        };
        // log10(1.02) = 0.0086 of 3 decades = 0.29%: hidden. log10(1.2) = 0.079 = 2.6%: seen.
        p.series = vec![
            line("a.dat", 0, 40e3),
            line("b.dat", 1, 40.8e3),
            line("c.dat", 2, 48e3),
        ];
        assert!(
            !coincide(&p.series[0], &p.series[1]),
            "apart by 2%: not coincide's case"
        );
        let names: Vec<String> = legend_entries(&p).into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a.dat = b.dat", "c.dat"]);
    }

    #[test]
    fn legend_entries_of_device_groups_do_not_overlap() {
        // 64 devices in groups: "#0 ... #63 (24 devices)" ran into "#3 ... #62 (34 devices)".
        let entries: Vec<LegendEntry> = [
            "afa-m2-2018#0 ... afa-m2-2018#63 (24 devices)",
            "afa-m2-2018#3 ... afa-m2-2018#62 (34 devices)",
            "afa-m2-2018#1 ... afa-m2-2018#61 (6 devices)",
        ]
        .iter()
        .map(|n| LegendEntry {
            name: n.to_string(),
            color: palette(0),
            kind: LegendKind::Line,
        })
        .collect();
        let (at, _) = legend_layout(&entries, DEFAULT_SIZE.0);
        // DejaVu Sans at 12 px: digits and '#' 7.6 px, letters up to 7.5 px; every entry's text
        // ends before the next entry on its row starts.
        for k in 1..at.len() {
            if at[k].1 == at[k - 1].1 {
                let text_end = at[k - 1].0 + 24 + (7.6 * entries[k - 1].name.len() as f64) as i32;
                assert!(text_end < at[k].0, "{k}: {at:?}");
            }
        }
    }

    #[test]
    fn png_renders_text_with_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::env::var_os("NINES_PLOT_PNG")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| dir.path().join("p.png"));
        // Files are the caller's (the binary writes through its output layer); here a test file.
        std::fs::write(&path, render_png_bytes(&sample(), DEFAULT_SIZE).unwrap()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(
            bytes.len() > 10_000,
            "suspiciously small PNG: {}",
            bytes.len()
        );
    }
}
