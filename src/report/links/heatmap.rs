//! The link heatmap (`.png` or `.svg`, by extension, as `--plot`): the GB/s
//! matrix as a square grid, sender rows (rank 0 at the top), receiver
//! columns, each cell coloured from red (slow) through yellow to green (the
//! fastest link) with its value written in it where there is room; slow
//! links framed; a colour bar beside it; titled with the size and verdict.

use super::{gbps_text, span, verdict_text, LinkReport};
use crate::report::plot::PlotError;
use crate::units::Bytes;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

use crate::report::plot::{register, FAMILY};

/// Sizes and colours of the heatmap.
struct Style;

impl Style {
    const SIZE: (u32, u32) = (1100, 1040);
    const TITLE_H: u32 = 90;
    const BAR_W: u32 = 130;
    const TITLE_PT: u32 = 26;
    const SUBTITLE_PT: u32 = 17;
    const AXIS_PT: u32 = 20;
    const LABEL_PT: u32 = 15;
    /// Values are written in cells at least this many pixels wide.
    const MIN_TEXT_CELL: f64 = 30.0;
    /// Axes label at most this many ranks.
    const MAX_LABELS: usize = 32;
    /// Wider worlds are refused (n x n cells).
    const MAX_RANKS: usize = 1024;
    const SLOW: RGBColor = RGBColor(215, 48, 39);
    const MID: RGBColor = RGBColor(254, 224, 139);
    const FAST: RGBColor = RGBColor(26, 152, 80);
    const UNMEASURED: RGBColor = RGBColor(225, 225, 225);
    const DIAGONAL: RGBColor = RGBColor(190, 190, 190);

    /// The colour of `t` in 0..=1 of the fastest link's GB/s.
    fn color(t: f64) -> RGBColor {
        let t = if t.is_finite() {
            t.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let (a, b, u) = if t < 0.5 {
            (Style::SLOW, Style::MID, t * 2.0)
        } else {
            (Style::MID, Style::FAST, t * 2.0 - 1.0)
        };
        let mix = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * u).round() as u8;
        RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
    }

    /// Black on light cells, white on dark ones.
    fn ink(c: RGBColor) -> RGBColor {
        let luma = 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
        if luma < 140.0 {
            WHITE
        } else {
            BLACK
        }
    }
}

/// One axis over `n` ranks, one unit per rank, labelled at cell centres;
/// `down` puts rank 0 at the top.
struct Cells {
    n: usize,
    down: bool,
}

impl Ranged for Cells {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.n as f64
    }
    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (a, b) = if self.down { (limit.1, limit.0) } else { limit };
        let share = value / self.n.max(1) as f64;
        a + (share * (b - a) as f64).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let step = self.n.div_ceil(Style::MAX_LABELS).max(1);
        (0..self.n).step_by(step).map(|k| k as f64 + 0.5).collect()
    }
}

fn err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// The title, and the verdict's first line under it.
fn title<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &LinkReport,
) -> Result<(), PlotError> {
    let head = format!(
        "links at {}: GB/s per directed link (1 GB = 10^9 B)",
        Bytes(r.bytes)
    );
    area.draw(&Text::new(
        head,
        (24, 14),
        (FAMILY, Style::TITLE_PT).into_font(),
    ))
    .map_err(err)?;
    let text = verdict_text(r);
    let mut lines = text.lines();
    let mut sub = lines.next().unwrap_or_default().to_string();
    let more = lines.count();
    if more > 0 {
        sub.push_str(&format!(" (and {more} more)"));
    }
    let style = (FAMILY, Style::SUBTITLE_PT)
        .into_font()
        .color(&RGBColor(80, 80, 80));
    area.draw(&Text::new(sub, (24, 54), style)).map_err(err)
}

/// The grid of cells, its axes, and a frame around slow links.
fn grid<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &LinkReport,
    n: usize,
    max: f64,
) -> Result<(), PlotError> {
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(64)
        .y_label_area_size(72)
        .build_cartesian_2d(Cells { n, down: false }, Cells { n, down: true })
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("receiver")
        .y_desc("sender")
        .x_label_formatter(&|v| format!("{}", v.floor()))
        .y_label_formatter(&|v| format!("{}", v.floor()))
        .label_style((FAMILY, Style::LABEL_PT))
        .axis_desc_style((FAMILY, Style::AXIS_PT))
        .draw()
        .map_err(err)?;
    let cell = |from: usize, to: usize| {
        let (x, y) = (to as f64, from as f64);
        [(x, y), (x + 1.0, y + 1.0)]
    };
    let diagonal = (0..n).map(|i| Rectangle::new(cell(i, i), Style::DIAGONAL.filled()));
    chart.draw_series(diagonal).map_err(err)?;
    let mut measured = vec![false; n * n];
    let mut texts = Vec::new();
    for p in r.pairs.iter().filter(|p| p.measured()) {
        measured[p.from * n + p.to] = true;
        let color = Style::color(p.gbps / max);
        chart
            .draw_series([Rectangle::new(cell(p.from, p.to), color.filled())])
            .map_err(err)?;
        texts.push((p, Style::ink(color)));
    }
    let unmeasured = (0..n * n)
        .filter(|&i| i / n != i % n && !measured[i])
        .map(|i| Rectangle::new(cell(i / n, i % n), Style::UNMEASURED.filled()));
    chart.draw_series(unmeasured).map_err(err)?;
    let px = chart.plotting_area().dim_in_pixel().0 as f64 / n as f64;
    if px >= Style::MIN_TEXT_CELL {
        let pt = (px * 0.3).min(18.0);
        for (p, ink) in texts {
            let style = TextStyle::from((FAMILY, pt).into_font())
                .color(&ink)
                .pos(Pos::new(HPos::Center, VPos::Center));
            let at = (p.to as f64 + 0.5, p.from as f64 + 0.5);
            chart
                .draw_series([Text::new(gbps_text(p.gbps), at, style)])
                .map_err(err)?;
        }
    }
    let frame = BLACK.stroke_width((px / 12.0).clamp(1.0, 3.0) as u32);
    let framed = r
        .pairs
        .iter()
        .filter(|p| p.measured() && r.findings.iter().any(|f| f.covers(p.from, p.to)))
        .map(|p| Rectangle::new(cell(p.from, p.to), frame));
    chart.draw_series(framed).map_err(err)?;
    Ok(())
}

/// The colour scale, 0 at the bottom to the fastest link at the top.
fn bar<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, max: f64) -> Result<(), PlotError> {
    const STEPS: i32 = 100;
    let (_, h) = area.dim_in_pixel();
    let (top, bottom) = (60, h as i32 - 90);
    let x = 20;
    let step_h = (bottom - top) as f64 / STEPS as f64;
    for i in 0..STEPS {
        let y1 = bottom - (i as f64 * step_h) as i32;
        let y0 = bottom - ((i + 1) as f64 * step_h).ceil() as i32;
        let c = Style::color(i as f64 / (STEPS - 1) as f64);
        area.draw(&Rectangle::new([(x, y0), (x + 28, y1)], c.filled()))
            .map_err(err)?;
    }
    let label = (FAMILY, Style::LABEL_PT).into_font();
    area.draw(&Text::new("GB/s", (x, top - 30), label.clone()))
        .map_err(err)?;
    let style = TextStyle::from(label).pos(Pos::new(HPos::Left, VPos::Center));
    for (v, y) in [(max, top), (max / 2.0, (top + bottom) / 2), (0.0, bottom)] {
        area.draw(&Text::new(gbps_text(v), (x + 36, y), style.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// Why no heatmap of `r` can be drawn (no link measured, too many ranks
/// to show), if none can.
pub fn undrawable(r: &LinkReport, nranks: usize) -> Option<String> {
    let n = span(r, nranks);
    if n == 0 || !r.pairs.iter().any(|p| p.measured()) {
        return Some("no link was measured".into());
    }
    (n > Style::MAX_RANKS).then(|| {
        format!(
            "{n} ranks: a heatmap is drawn for at most {}",
            Style::MAX_RANKS
        )
    })
}

/// The whole figure on `root`.
fn figure<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    r: &LinkReport,
    nranks: usize,
) -> Result<(), PlotError> {
    if let Some(why) = undrawable(r, nranks) {
        return Err(PlotError::Draw(why));
    }
    let n = span(r, nranks);
    let max = r
        .pairs
        .iter()
        .filter(|p| p.measured())
        .map(|p| p.gbps)
        .fold(0.0, f64::max);
    root.fill(&WHITE).map_err(err)?;
    let (w, _) = root.dim_in_pixel();
    let (top, rest) = root.split_vertically(Style::TITLE_H);
    title(&top, r)?;
    let (cells, key) = rest.split_horizontally(w - Style::BAR_W);
    grid(&cells, r, n, max)?;
    bar(&key, max)?;
    root.present().map_err(err)
}

/// The heatmap as SVG text.
fn svg(r: &LinkReport, nranks: usize) -> Result<String, PlotError> {
    register()?;
    let mut text = String::new();
    figure(
        SVGBackend::with_string(&mut text, Style::SIZE).into_drawing_area(),
        r,
        nranks,
    )?;
    Ok(text)
}

/// A heatmap of the GB/s matrix, PNG or SVG by the extension of `path`.
pub fn plot_heatmap(r: &LinkReport, nranks: usize, path: &Path) -> Result<(), PlotError> {
    crate::report::plot::write_image(
        path,
        Style::SIZE,
        || svg(r, nranks),
        |rgb| {
            register()?;
            figure(
                BitMapBackend::with_buffer(rgb, Style::SIZE).into_drawing_area(),
                r,
                nranks,
            )
        },
    )
}
