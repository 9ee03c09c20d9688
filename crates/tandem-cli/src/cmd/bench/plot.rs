//! The SVG of `tandem bench frame --plot FILE`: frame latency (p50 and p99) against rank count,
//! the TCP fan-out baseline beside it; ranks on a log2 axis, µs on a log axis. Owns drawing only.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::frame::{FrameReport, FrameRow};

/// One line of the plot: legend, colour, thick (p50) or thin (p99), and the figure it draws.
type Series = (&'static str, RGBColor, bool, fn(&FrameRow) -> f64);

/// Draw `report` to `path` (an SVG, 800 × 500).
///
/// # Errors
/// When the file cannot be written.
pub(super) fn frame_svg(report: &FrameReport, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let values = report.rows.iter().flat_map(|r| {
            [
                r.frame_us.p50,
                r.frame_us.p99,
                r.baseline_us.p50,
                r.baseline_us.p99,
            ]
        });
        let top = values.clone().fold(1.0, f64::max) * 2.0;
        let bottom = values.fold(f64::INFINITY, f64::min).max(1.0) / 5.0;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Frame latency: leader seals → last follower holds the frame",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0.6f64..4.4f64, (bottom..top).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("agent processes (ranks)")
            .y_desc("µs, log scale")
            .x_labels(5)
            .y_labels(12)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 {
                    format!("{}", 2f64.powf(x.round()))
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        let series: [Series; 4] = [
            ("frame p50", RGBColor(200, 30, 30), true, |r| r.frame_us.p50),
            ("frame p99", RGBColor(200, 30, 30), false, |r| {
                r.frame_us.p99
            }),
            (
                "TCP fan-out baseline p50",
                RGBColor(30, 80, 200),
                true,
                |r| r.baseline_us.p50,
            ),
            (
                "TCP fan-out baseline p99",
                RGBColor(30, 80, 200),
                false,
                |r| r.baseline_us.p99,
            ),
        ];
        for (name, color, solid, f) in series {
            let points: Vec<(f64, f64)> = report
                .rows
                .iter()
                .map(|r| (f64::from(r.ranks).log2(), f(r)))
                .collect();
            let style = if solid {
                color.stroke_width(3)
            } else {
                color.stroke_width(1)
            };
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))
}
