//! Plots (`--plot FILE.png|FILE.svg`): bus bandwidth against size (log2
//! axis) and time against size (log-log), side by side, one series per
//! collective x algorithm x engine (and per results file when several are
//! overlaid), a legend beside them, titled with the machine and the run.
//! One function per figure part; one style block ([`Style`]). Text is drawn
//! with DejaVu Sans embedded in the binary, so PNGs render on a machine
//! without fontconfig or freetype.

mod series;

pub use series::{series, Series, Source};

use super::{Results, Row, Sink};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use series::{decade_minors, size_label, time_label, titles, whole_ticks, x_range};
use std::io;
use std::path::{Path, PathBuf};

static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
pub(crate) const FAMILY: &str = "sans-serif";

/// Sizes, colours and fonts of every figure.
struct Style;

impl Style {
    const SIZE: (u32, u32) = (1800, 820);
    const TITLE_H: u32 = 86;
    /// Legend columns are as wide as their longest label, within these.
    const LEGEND_COL_W: (u32, u32) = (200, 420);
    const LEGEND_ROW_H: u32 = 24;
    const TITLE_PT: u32 = 28;
    const SUBTITLE_PT: u32 = 17;
    const CAPTION_PT: u32 = 22;
    const AXIS_PT: u32 = 18;
    const LABEL_PT: u32 = 15;
    /// Tableau's ten colours and six darker ones: distinct, and readable on
    /// white, so that every collective and algorithm of `all --algo all`
    /// (twelve cases) has its own.
    const COLORS: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(57, 59, 121),
        RGBColor(99, 121, 57),
        RGBColor(132, 60, 57),
        RGBColor(0, 128, 128),
        RGBColor(189, 158, 57),
    ];

    fn color(s: &Series) -> RGBColor {
        Style::COLORS[s.case % Style::COLORS.len()]
    }

    /// 0: disc, 1: triangle, 2: cross; by file, then past the tenth colour.
    fn shape(s: &Series) -> usize {
        (s.source + s.case / Style::COLORS.len()) % 3
    }
}

/// A `--plot` file name that ends in neither `.png` nor `.svg`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--plot {}: the file name must end in .png or .svg", .0.display())]
pub struct PlotKindError(pub PathBuf);

/// Why a plot was not drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(transparent)]
    Kind(#[from] PlotKindError),
    /// plotters failed (its errors are generic over the backend: kept as text).
    #[error("drawing the plot: {0}")]
    Draw(String),
    #[error("nothing to plot: the results have no rows")]
    Empty,
    #[error("the embedded font did not load")]
    Font,
    #[error("--plot {}: {source}", path.display())]
    At {
        path: PathBuf,
        source: Box<PlotError>,
    },
    #[error("--plot {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// The image formats `--plot` writes, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotKind {
    Png,
    Svg,
}

impl PlotKind {
    /// The kind of `path`, or why it has none.
    pub fn of(path: &Path) -> Result<PlotKind, PlotKindError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("png") => Ok(PlotKind::Png),
            Some("svg") => Ok(PlotKind::Svg),
            _ => Err(PlotKindError(path.to_path_buf())),
        }
    }
}

/// A linear axis over logarithms whose grid lines sit where we say: bold
/// ones at whole powers, light ones between them.
struct Ticks {
    range: RangedCoordf64,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ticks {
    fn new(lo: f64, hi: f64, bold: Vec<f64>, light: Vec<f64>) -> Ticks {
        Ticks {
            range: (lo..hi).into(),
            bold,
            light,
        }
    }
}

impl Ranged for Ticks {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> std::ops::Range<f64> {
        self.range.range()
    }
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }
}

type Chart<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<Ticks, Y>>;

fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Draws each series as a line with a marker per point; the marker's shape
/// tells apart series that share a colour.
fn draw_series<DB, Y>(
    chart: &mut Chart<'_, DB, Y>,
    series: &[Series],
    y: impl Fn(&(u64, f64, f64)) -> f64,
) -> Result<(), PlotError>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        let color = Style::color(s);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| ((p.0.max(1) as f64).log2(), y(p)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?;
        match Style::shape(s) {
            0 => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled()))),
            1 => chart.draw_series(
                pts.iter()
                    .map(|&p| TriangleMarker::new(p, 6, color.filled())),
            ),
            _ => chart.draw_series(pts.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2)))),
        }
        .map_err(err)?;
    }
    Ok(())
}

/// The left chart: bus bandwidth (linear) against size (log2).
fn busbw_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
    (x0, x1): (f64, f64),
) -> Result<(), PlotError> {
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.08 } else { 1.0 };
    let decimals = match ymax {
        y if y >= 20.0 => 0,
        y if y >= 2.0 => 1,
        y if y >= 0.2 => 2,
        _ => 3,
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Bus bandwidth against message size",
            (FAMILY, Style::CAPTION_PT),
        )
        .margin(16)
        .x_label_area_size(62)
        .y_label_area_size(82)
        .build_cartesian_2d(
            Ticks::new(x0, x1, whole_ticks(x0, x1, 12), vec![]),
            0f64..ymax,
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log2 scale)")
        .y_desc("bus bandwidth (GB/s, 1 GB = 10^9 B)")
        .x_label_formatter(&|v| size_label(*v))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .y_labels(10)
        .y_max_light_lines(1)
        .label_style((FAMILY, Style::LABEL_PT))
        .axis_desc_style((FAMILY, Style::AXIS_PT))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(err)?;
    draw_series(&mut chart, series, |p| p.1)
}

/// The right chart: time against size, both on log axes.
fn time_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
    (x0, x1): (f64, f64),
) -> Result<(), PlotError> {
    let times = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.2))
        .filter(|t| *t > 0.0);
    let (lo, hi) = times.fold((f64::MAX, 0f64), |(a, b), t| (a.min(t), b.max(t)));
    let (lo, hi) = if hi > 0.0 { (lo, hi) } else { (1.0, 10.0) };
    let (y0, y1) = (lo.log10().floor() - 0.05, hi.log10().ceil() + 0.05);
    let mut chart = ChartBuilder::on(area)
        .caption("Time against message size", (FAMILY, Style::CAPTION_PT))
        .margin(16)
        .x_label_area_size(62)
        .y_label_area_size(82)
        .build_cartesian_2d(
            Ticks::new(x0, x1, whole_ticks(x0, x1, 12), vec![]),
            Ticks::new(y0, y1, whole_ticks(y0, y1, 10), decade_minors(y0, y1)),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes, log2 scale)")
        .y_desc("time per iteration (log scale)")
        .x_label_formatter(&|v| size_label(*v))
        .y_label_formatter(&|v| time_label(*v))
        .label_style((FAMILY, Style::LABEL_PT))
        .axis_desc_style((FAMILY, Style::AXIS_PT))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(err)?;
    draw_series(&mut chart, series, |p| p.2.max(1e-3).log10())
}

/// Legend entries that fit in one column of an area `height` tall.
fn legend_rows(height: u32) -> usize {
    ((height.saturating_sub(60)) / Style::LEGEND_ROW_H).max(1) as usize
}

/// The width of one legend column: a line sample and the longest label.
fn legend_col_w(series: &[Series]) -> u32 {
    let chars = series
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let (lo, hi) = Style::LEGEND_COL_W;
    (60 + chars as u32 * Style::LABEL_PT * 6 / 10).clamp(lo, hi)
}

/// The legend: a sample of each series' line and marker, and its label.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
) -> Result<(), PlotError> {
    let per_col = legend_rows(area.dim_in_pixel().1);
    let col_w = legend_col_w(series) as i32;
    area.draw(&Text::new(
        "series",
        (12, 14),
        (FAMILY, Style::AXIS_PT).into_font(),
    ))
    .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Style::color(s);
        let x = 12 + (i / per_col) as i32 * col_w;
        let y = 52 + (i % per_col) as i32 * Style::LEGEND_ROW_H as i32;
        area.draw(&PathElement::new(
            vec![(x, y), (x + 34, y)],
            color.stroke_width(2),
        ))
        .map_err(err)?;
        let c = (x + 17, y);
        match Style::shape(s) {
            0 => area.draw(&Circle::new(c, 4, color.filled())),
            1 => area.draw(&TriangleMarker::new(c, 6, color.filled())),
            _ => area.draw(&Cross::new(c, 5, color.stroke_width(2))),
        }
        .map_err(err)?;
        let style = TextStyle::from((FAMILY, Style::LABEL_PT).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Left,
                plotters::style::text_anchor::VPos::Center,
            ),
        );
        area.draw(&Text::new(s.label.clone(), (x + 44, y), style))
            .map_err(err)?;
    }
    Ok(())
}

/// The whole figure on `root`.
fn figure<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    sources: &[Source<'_>],
) -> Result<(), PlotError> {
    let series = series(sources);
    if series.is_empty() {
        return Err(PlotError::Empty);
    }
    root.fill(&WHITE).map_err(err)?;
    let (w, h) = root.dim_in_pixel();
    let (top, rest) = root.split_vertically(Style::TITLE_H);
    let (title, subtitle) = titles(sources);
    top.draw(&Text::new(
        title,
        (24, 14),
        (FAMILY, Style::TITLE_PT).into_font(),
    ))
    .map_err(err)?;
    top.draw(&Text::new(
        subtitle,
        (24, 54),
        (FAMILY, Style::SUBTITLE_PT)
            .into_font()
            .color(&RGBColor(80, 80, 80)),
    ))
    .map_err(err)?;
    let cols = series.len().div_ceil(legend_rows(h - Style::TITLE_H)) as u32;
    let legend_w = (cols * legend_col_w(&series)).min(w / 2);
    let (charts, key) = rest.split_horizontally(w - legend_w);
    let halves = charts.split_evenly((1, 2));
    let xr = x_range(&series);
    busbw_chart(&halves[0], &series, xr)?;
    time_chart(&halves[1], &series, xr)?;
    legend(&key, &series)?;
    root.present().map_err(err)
}

/// Registers the embedded font (once); every plot of the crate calls it.
pub(crate) fn register() -> Result<(), PlotError> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE.get_or_init(|| register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// The figure as SVG text.
pub fn svg(sources: &[Source<'_>]) -> Result<String, PlotError> {
    register()?;
    let mut text = String::new();
    figure(
        SVGBackend::with_string(&mut text, Style::SIZE).into_drawing_area(),
        sources,
    )?;
    Ok(text)
}

/// Draws the figure into `path`, PNG or SVG by its extension.
pub fn write(path: &Path, sources: &[Source<'_>]) -> Result<(), PlotError> {
    write_image(
        path,
        Style::SIZE,
        || svg(sources),
        |rgb| {
            register()?;
            figure(
                BitMapBackend::with_buffer(rgb, Style::SIZE).into_drawing_area(),
                sources,
            )
        },
    )
}

/// Writes an image of `size` to `path`, PNG or SVG by its extension:
/// `svg` makes the SVG text, `png` draws into an RGB buffer, encoded here.
/// Either goes through a temporary file and a rename (a failed write
/// leaves no half image, and says why in plain words: `No space left on
/// device`), or in place for a special file (`/dev/stdout`).
pub fn write_image(
    path: &Path,
    size: (u32, u32),
    svg: impl FnOnce() -> Result<String, PlotError>,
    png: impl FnOnce(&mut [u8]) -> Result<(), PlotError>,
) -> Result<(), PlotError> {
    let at = |e: PlotError| PlotError::At {
        path: path.to_path_buf(),
        source: Box::new(e),
    };
    let bytes = match PlotKind::of(path)? {
        PlotKind::Svg => svg().map_err(at)?.into_bytes(),
        PlotKind::Png => {
            let (w, h) = size;
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            png(&mut rgb).map_err(at)?;
            encode_png(&rgb, size).map_err(at)?
        }
    };
    super::json::write_atomic(path, &bytes).map_err(|source| PlotError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// An RGB buffer of `size` as PNG bytes.
fn encode_png(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, PlotError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(err)?;
    writer.write_image_data(rgb).map_err(err)?;
    writer.finish().map_err(err)?;
    Ok(out)
}

/// Draws the plot when a sweep finishes.
pub struct PlotSink {
    pub path: PathBuf,
}

impl Sink for PlotSink {
    fn row(&mut self, _row: &Row) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, results: &Results) -> io::Result<()> {
        if results.rows.is_empty() {
            return Ok(());
        }
        write(
            &self.path,
            &[Source {
                label: None,
                results,
            }],
        )
        .map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::series::tests::sweep;
    use super::*;
    use crate::report::fixtures::results;

    #[test]
    fn plot_kind_is_the_extension() {
        assert_eq!(PlotKind::of(Path::new("a.PNG")), Ok(PlotKind::Png));
        assert_eq!(PlotKind::of(Path::new("b.svg")), Ok(PlotKind::Svg));
        assert_eq!(
            PlotKind::of(Path::new("a.jpg")).unwrap_err().to_string(),
            "--plot a.jpg: the file name must end in .png or .svg"
        );
    }

    #[test]
    fn svg_has_title_axes_and_legend() {
        let r = results(sweep("ring"));
        let text = svg(&[Source {
            label: None,
            results: &r,
        }])
        .unwrap();
        for want in [
            "collbench on node1: 4 ranks, host engine",
            "message size (bytes, log2 scale)",
            "bus bandwidth (GB/s",
            "time per iteration (log scale)",
            "all-reduce ring builtin",
            "1MiB",
        ] {
            assert!(text.contains(want), "missing '{want}'");
        }
    }

    #[test]
    fn png_is_written_and_empty_results_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let r = results(sweep("ring"));
        write(
            &path,
            &[Source {
                label: None,
                results: &r,
            }],
        )
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 20_000);
        let e = write(
            &path,
            &[Source {
                label: None,
                results: &results(vec![]),
            }],
        )
        .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("nothing to plot"), "{e}");
    }
}
