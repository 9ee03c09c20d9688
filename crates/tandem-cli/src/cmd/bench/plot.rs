//! The SVGs of `tandem bench frame --plot FILE` (frame latency, p50 and p99, against rank count,
//! the TCP fan-out baseline beside it; ranks on a log2 axis, µs on a log axis) and of
//! `tandem bench datapath --plot FILE` (GB/s per rank against shard size, the memcpy floor
//! beside it). Owns drawing only.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::frame::{FrameReport, FrameRow};

/// One line of the data-path plot: legend, thick (store) or thin (load), its points.
type Line = (String, bool, Vec<(f64, f64)>);

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
                r.relay_us.p50,
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
        let series: [Series; 5] = [
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
            (
                "hop floor p50 (hub relay, 3 hops)",
                RGBColor(40, 150, 60),
                true,
                |r| r.relay_us.p50,
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

/// Draw the data-path sweep to `path` (an SVG, 900 × 560): GB/s per rank of multi-block
/// tasks against shard size (log axes), host store and load per rank count and copy-worker
/// count, the memcpy floor of the same run beside them.
///
/// # Errors
/// When the file cannot be written.
pub(super) fn datapath_svg(
    reports: &[super::datapath::DatapathReport],
    path: &Path,
) -> anyhow::Result<()> {
    use super::datapath::{size_label, TierCase, SHARDS};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let x_of = |shard: usize| (shard as f64).log2();
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let rows = || {
            reports.iter().flat_map(|r| {
                r.rows
                    .iter()
                    .filter(|row| row.blocks_per_task > 1 && row.tier == TierCase::Host)
                    .map(move |row| (r.copy_workers, row))
            })
        };
        let values = rows().flat_map(|(_, row)| {
            [
                row.figures.store.gbps_per_rank,
                row.figures.load.gbps_per_rank,
                row.floor.store_gbps,
                row.floor.load_gbps,
            ]
        });
        let top = values.clone().fold(0.1, f64::max) * 2.0;
        let bottom = values.fold(f64::INFINITY, f64::min).max(0.001) / 2.0;
        let (lo, hi) = (x_of(SHARDS[0]) - 0.5, x_of(SHARDS[SHARDS.len() - 1]) + 0.5);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Data path, multi-block tasks, host tier: GB/s per rank (call → finish frame)",
                ("sans-serif", 18),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(lo..hi, (bottom..top).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("shard size")
            .y_desc("GB/s per rank, log scale")
            .x_labels(20)
            .y_labels(10)
            .x_label_formatter(&|x| {
                SHARDS
                    .iter()
                    .find(|&&s| (x_of(s) - x).abs() < 0.05)
                    .map(|&s| size_label(s))
                    .unwrap_or_default()
            })
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()?;
        let palette = [
            RGBColor(200, 30, 30),
            RGBColor(30, 80, 200),
            RGBColor(30, 150, 60),
            RGBColor(150, 60, 160),
            RGBColor(220, 130, 0),
            RGBColor(0, 150, 160),
        ];
        let mut lines: Vec<Line> = Vec::new();
        let mut keys: Vec<(u32, u32)> = rows().map(|(k, row)| (k, row.ranks)).collect();
        keys.sort_unstable();
        keys.dedup();
        for &(k, n) in &keys {
            let pick = |load: bool| -> Vec<(f64, f64)> {
                rows()
                    .filter(|(kk, row)| *kk == k && row.ranks == n)
                    .map(|(_, row)| {
                        let f = &row.figures;
                        let g = if load {
                            f.load.gbps_per_rank
                        } else {
                            f.store.gbps_per_rank
                        };
                        (x_of(row.shard_bytes), g)
                    })
                    .collect()
            };
            let workers = if k == 0 {
                String::new()
            } else {
                format!(", {k} copy workers")
            };
            lines.push((format!("store, {n} ranks{workers}"), true, pick(false)));
            lines.push((format!("load, {n} ranks{workers}"), false, pick(true)));
        }
        let floor = |load: bool| -> Vec<(f64, f64)> {
            SHARDS
                .iter()
                .filter_map(|&s| {
                    rows()
                        .find(|(_, row)| row.shard_bytes == s)
                        .map(|(_, row)| {
                            (
                                x_of(s),
                                if load {
                                    row.floor.load_gbps
                                } else {
                                    row.floor.store_gbps
                                },
                            )
                        })
                })
                .collect()
        };
        for (i, (name, solid, points)) in lines.into_iter().enumerate() {
            let color = palette[(i / 2) % palette.len()];
            let style = if solid {
                color.stroke_width(3)
            } else {
                color.stroke_width(1)
            };
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        for (name, load) in [
            ("memcpy floor, store direction", false),
            ("memcpy floor, load direction", true),
        ] {
            let style = BLACK.stroke_width(if load { 1 } else { 2 });
            chart
                .draw_series(LineSeries::new(floor(load), style))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
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
