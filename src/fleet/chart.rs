//! `--svg FILE`: queue length and cards busy over time, every flow of the simulation on
//! one chart (two panels over one time axis), drawn with plotters' SVG backend. Each
//! line is the time-weighted mean over one of `BUCKETS` equal slices of the run, so a
//! million jobs still draw as a few hundred points.

use plotters::prelude::*;

use super::sim::Point;
use super::{Flow, FlowResult, Setup};

const BUCKETS: usize = 400;
const SIZE: (u32, u32) = (1000, 640);

/// Time-weighted means of a step function (`points`, each value holding until the
/// next point, the last until `end`) over `n` equal slices of [0, end].
pub fn bucket_means(
    points: &[Point],
    end: f64,
    n: usize,
    value: impl Fn(&Point) -> f64,
) -> Vec<f64> {
    let mut sums = vec![0.0; n];
    if end <= 0.0 || n == 0 {
        return sums;
    }
    let width = end / n as f64;
    let slice = |t: f64| ((t / width) as usize).min(n - 1);
    for (i, p) in points.iter().enumerate() {
        let (a, b) = (p.at, points.get(i + 1).map_or(end, |q| q.at).min(end));
        let v = value(p);
        if b <= a || v == 0.0 {
            continue;
        }
        for (k, sum) in sums
            .iter_mut()
            .enumerate()
            .take(slice(b) + 1)
            .skip(slice(a))
        {
            let lo = a.max(k as f64 * width);
            let hi = b.min((k + 1) as f64 * width);
            if hi > lo {
                *sum += v * (hi - lo);
            }
        }
    }
    sums.iter().map(|s| s / width).collect()
}

fn color(flow: Flow) -> RGBColor {
    match flow {
        Flow::Old => RGBColor(204, 51, 17),
        Flow::New => RGBColor(0, 119, 187),
        Flow::Given => RGBColor(0, 119, 187),
    }
}

fn label(flow: Flow) -> &'static str {
    match flow {
        Flow::Old => "old: warm inside the lock",
        Flow::New => "new: warm && device",
        Flow::Given => "given",
    }
}

/// The time unit that keeps the axis readable: seconds, minutes, hours or days.
fn unit(end: f64) -> (f64, &'static str) {
    match end {
        e if e <= 600.0 => (1.0, "seconds"),
        e if e <= 6.0 * 3600.0 => (60.0, "minutes"),
        e if e <= 4.0 * 86400.0 => (3600.0, "hours"),
        _ => (86400.0, "days"),
    }
}

/// An axis label: whole numbers on an axis that spans 5 or more.
fn tick(v: f64, span: f64) -> String {
    match span >= 5.0 {
        true => format!("{v:.0}"),
        false => format!("{v:.1}"),
    }
}

/// What plotters' SVG backend can fail with (it writes into a string, so in practice
/// only a drawing mistake of ours).
pub type ChartError = plotters::drawing::DrawingAreaErrorKind<std::io::Error>;

/// The chart as SVG text.
pub fn svg(setup: &Setup, results: &[FlowResult]) -> Result<String, ChartError> {
    let end = results
        .iter()
        .map(|r| r.stats.makespan_secs)
        .fold(0.0, f64::max);
    let (scale, unit) = unit(end);
    let x_max = (end / scale).max(1e-9);
    let centre = |k: usize| (k as f64 + 0.5) * x_max / BUCKETS as f64;
    let queued: Vec<Vec<f64>> = results
        .iter()
        .map(|r| bucket_means(&r.timeline, end, BUCKETS, |p| p.queued as f64))
        .collect();
    let busy: Vec<Vec<f64>> = results
        .iter()
        .map(|r| bucket_means(&r.timeline, end, BUCKETS, |p| p.busy as f64))
        .collect();
    let q_max = queued.iter().flatten().fold(1.0_f64, |m, &v| m.max(v)) * 1.1;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, bottom) = root.split_vertically(SIZE.1 / 2);
        let title = format!(
            "{} jobs on {} cards, arrivals {}, seed {}: jobs queued for the lock",
            setup.jobs, setup.cards, setup.arrival, setup.seed
        );
        // One legend, in the top panel's upper left (queues start empty): the colours
        // are the same below.
        let panels = [
            (&top, title, "jobs queued (mean)", q_max, &queued, true),
            (
                &bottom,
                "cards busy".to_string(),
                "cards busy (mean)",
                setup.cards as f64 * 1.05,
                &busy,
                false,
            ),
        ];
        for (area, caption, y_desc, y_max, series, legend) in panels {
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
            chart
                .configure_mesh()
                .x_desc(format!("time ({unit})"))
                .y_desc(y_desc)
                .x_label_formatter(&|v| tick(*v, x_max))
                .y_label_formatter(&|v| tick(*v, y_max))
                .light_line_style(WHITE.mix(0.0))
                .draw()?;
            for (r, values) in results.iter().zip(series.iter()) {
                let c = color(r.flow);
                let line = values.iter().enumerate().map(|(k, &v)| (centre(k), v));
                chart
                    .draw_series(LineSeries::new(line, c.stroke_width(2)))?
                    .label(label(r.flow))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            if !legend {
                continue;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .draw()?;
        }
        root.present()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(at: f64, queued: u32) -> Point {
        Point {
            at,
            queued,
            busy: 0,
        }
    }

    #[test]
    fn bucket_means_weigh_each_value_by_how_long_it_held() {
        // 0 until 1, 2 from 1 to 3, 4 from 3 to 4 (the end).
        let pts = [p(0.0, 0), p(1.0, 2), p(3.0, 4)];
        let m = bucket_means(&pts, 4.0, 2, |p| p.queued as f64);
        assert_eq!(m, vec![1.0, 3.0]);
        let m = bucket_means(&pts, 4.0, 4, |p| p.queued as f64);
        assert_eq!(m, vec![0.0, 2.0, 2.0, 4.0]);
        // The overall mean is kept whatever the slicing.
        let m = bucket_means(&pts, 4.0, 3, |p| p.queued as f64);
        assert!((m.iter().sum::<f64>() / 3.0 - 2.0).abs() < 1e-12, "{m:?}");
    }
}
