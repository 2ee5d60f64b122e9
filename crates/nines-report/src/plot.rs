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

/// The plot as a PNG file.
pub fn render_png(plot: &Plot, path: &std::path::Path, size: (u32, u32)) -> Result<(), PlotError> {
    let png = render_png_bytes(plot, size)?;
    // Written by std, not by plotters' file backend, so that a full disk reads "No space left
    // on device" rather than a debug dump of nested error enums.
    std::fs::write(path, png)?;
    Ok(())
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

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &Plot,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
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
    let mut chart = ChartBuilder::on(root)
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

    for band in &plot.bands {
        let mut poly: Vec<(f64, f64)> = Vec::with_capacity(band.points.len() * 2);
        for &(x, lo, _) in &band.points {
            if let (Some(x), Some(lo)) = (plot.x.to_coord(x), plot.y.to_coord(lo)) {
                poly.push((clamp(x, xr), clamp(lo, yr)));
            }
        }
        for &(x, _, hi) in band.points.iter().rev() {
            if let (Some(x), Some(hi)) = (plot.x.to_coord(x), plot.y.to_coord(hi)) {
                poly.push((clamp(x, xr), clamp(hi, yr)));
            }
        }
        if poly.len() < 3 {
            continue;
        }
        let color = rgb(band.color);
        let anno = chart.draw_series(std::iter::once(Polygon::new(poly, color.mix(0.25))))?;
        if plot.legend {
            anno.label(band.name.as_str()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.mix(0.25).filled())
            });
        }
    }

    for s in &plot.series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| Some((plot.x.to_coord(x)?, plot.y.to_coord(y)?)))
            .map(|(x, y)| (clamp(x, xr), clamp(y, yr)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let color = rgb(s.color);
        let width = if s.bold { 3 } else { 1 };
        let line_style = color.stroke_width(width);
        let anno = match s.style {
            SeriesStyle::Line | SeriesStyle::LinePoints => {
                if s.style == SeriesStyle::LinePoints {
                    chart.draw_series(
                        pts.iter()
                            .map(|&p| Circle::new(p, 3, color.filled()))
                            .collect::<Vec<_>>(),
                    )?;
                }
                chart.draw_series(LineSeries::new(pts.iter().copied(), line_style))?
            }
            SeriesStyle::Points => chart.draw_series(
                pts.iter()
                    // Few points (a sweep's categories) get big markers; a cloud gets dots.
                    .map(|&p| Circle::new(p, if pts.len() <= 50 { 5 } else { 2 }, color.filled()))
                    .collect::<Vec<_>>(),
            )?,
        };
        if plot.legend {
            anno.label(s.name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        }
        if let (Some(label), Some(&last)) = (&s.end_label, pts.last()) {
            // A few pixels right of and above the last point, clear of its marker.
            let font = ("sans-serif", 12).into_font().color(&color);
            chart.draw_series(std::iter::once(
                EmptyElement::at(last) + Text::new(label.clone(), (6, -14), font),
            ))?;
        }
    }

    if plot.legend && (!plot.series.is_empty() || !plot.bands.is_empty()) {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 12))
            .draw()?;
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
    fn png_renders_text_with_system_fonts() {
        let dir = tempfile::tempdir().unwrap();
        let path = std::env::var_os("NINES_PLOT_PNG")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| dir.path().join("p.png"));
        render_png(&sample(), &path, DEFAULT_SIZE).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(
            bytes.len() > 10_000,
            "suspiciously small PNG: {}",
            bytes.len()
        );
    }
}
