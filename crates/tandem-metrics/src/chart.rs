//! Small time-series charts for the status pages: inline SVG, one or two lines, a
//! y-axis from 0 to a rounded maximum, the newest value of each line in the legend.
//!
//! Owns the chart's geometry and its markup. Values come in already converted to the unit
//! shown (the caller formats them with a [`crate::units`] function). Every text is escaped;
//! no script, no external asset. Never reads a clock.

use std::fmt::Write as _;

use crate::html::escape;

/// Width and height of a chart's plot area, in CSS pixels.
const W: f64 = 320.0;
const H: f64 = 90.0;
/// Colours of the first and second line.
const COLOURS: [&str; 4] = ["#1f6feb", "#d9480f", "#2f9e44", "#862e9c"];

/// One line of a chart: a name for the legend and its points (`None`: no value then).
pub struct Line<'a> {
    /// The legend's name.
    pub name: &'a str,
    /// Values, oldest first, in the chart's unit.
    pub values: Vec<Option<f64>>,
}

/// An SVG chart titled `title` of `lines` (all of the same length, one value per sample),
/// values in the unit `format` writes (for the axis and the legend). With no value at all it
/// says so instead. The element has `data-chart` set to `id` (tests find charts by it).
pub fn svg_chart(
    id: &str,
    title: &str,
    lines: &[Line<'_>],
    format: impl Fn(f64) -> String,
) -> String {
    let mut out = String::with_capacity(2048);
    let max = lines
        .iter()
        .flat_map(|l| l.values.iter().flatten())
        .fold(0.0_f64, |m, v| if v.is_finite() { m.max(*v) } else { m });
    let top = nice_ceiling(max);
    let n = lines.iter().map(|l| l.values.len()).max().unwrap_or(0);
    let _ = write!(
        out,
        "<figure class=\"chart\" data-chart=\"{}\"><figcaption>{}</figcaption>",
        escape(id),
        escape(title)
    );
    let has_values = lines.iter().any(|l| l.values.iter().any(Option::is_some));
    if !has_values {
        out.push_str("<p class=\"muted\">no samples yet</p></figure>");
        return out;
    }
    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{t}\">\
         <rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#fff\" stroke=\"#d8dde3\"/>\
         <text x=\"4\" y=\"12\" class=\"axis\">{top_label}</text>\
         <text x=\"4\" y=\"{bottom}\" class=\"axis\">0</text>",
        w = W + 2.0,
        h = H + 2.0,
        t = escape(title),
        top_label = escape(&format(top)),
        bottom = H - 3.0,
    );
    for (i, line) in lines.iter().enumerate() {
        let mut path = String::new();
        // Points in the current stretch without a gap: a stretch of one point gets a short
        // horizontal stroke, so that it shows as a dot (round caps) instead of nothing.
        let mut run = 0usize;
        for (x, v) in line.values.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite()) else {
                if run == 1 {
                    path.push_str("h0.5 ");
                }
                run = 0;
                continue;
            };
            let px = if n > 1 {
                x as f64 * W / (n - 1) as f64
            } else {
                W / 2.0
            };
            let py = H - (v / top).clamp(0.0, 1.0) * (H - 14.0) - 1.0;
            let _ = write!(path, "{}{px:.1},{py:.1} ", if run > 0 { "L" } else { "M" });
            run += 1;
        }
        if run == 1 {
            path.push_str("h0.5 ");
        }
        let _ = write!(
            out,
            "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" stroke-linecap=\"round\"/>",
            path.trim_end(),
            COLOURS[i % COLOURS.len()]
        );
    }
    out.push_str("</svg><div class=\"legend\">");
    for (i, line) in lines.iter().enumerate() {
        let last = line.values.iter().rev().flatten().next().copied();
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{}: <b>{}</b></span>",
            COLOURS[i % COLOURS.len()],
            escape(line.name),
            escape(&last.map(&format).unwrap_or_else(|| "—".into()))
        );
    }
    out.push_str("</div></figure>");
    out
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `v` (1 for 0 or less).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * mag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_are_round() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(180.0), 200.0);
        assert_eq!(nice_ceiling(0.021), 0.025);
    }

    #[test]
    fn chart_has_a_path_per_line_and_the_last_values() {
        let svg = svg_chart(
            "steps",
            "Steps per second",
            &[
                Line {
                    name: "steps",
                    values: vec![Some(1.0), None, Some(3.0)],
                },
                Line {
                    name: "other <b>",
                    values: vec![Some(2.0), Some(2.0), Some(2.0)],
                },
            ],
            |v| format!("{v:.1}/s"),
        );
        assert_eq!(svg.matches("<path ").count(), 2);
        assert!(svg.contains("data-chart=\"steps\""));
        assert!(svg.contains("steps: <b>3.0/s</b>"));
        assert!(svg.contains("other &lt;b&gt;"), "names are escaped");
        // The gap (None) lifts the pen: the first line has two separate moves, each a lone
        // point drawn as a dot.
        let first = svg.split("d=\"").nth(1).unwrap();
        assert_eq!(first.split('"').next().unwrap().matches('M').count(), 2);
        assert_eq!(first.split('"').next().unwrap().matches("h0.5").count(), 2);
    }

    #[test]
    fn empty_chart_says_so() {
        let svg = svg_chart(
            "x",
            "X",
            &[Line {
                name: "a",
                values: vec![None],
            }],
            |v| v.to_string(),
        );
        assert!(svg.contains("no samples yet") && !svg.contains("<svg"));
    }
}
