//! Reports of results: the comparison table printed after a run, and
//! `sluice bench report`, which reads JSON lines and draws an SVG of
//! grouped bars (throughput, write and space amplification per phase and
//! engine) and a latency CDF.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{PhaseResult, Result};

/// Reads the JSON lines `--out` wrote; a bad line is an error naming it.
pub fn read_jsonl(path: &Path) -> Result<Vec<PhaseResult>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not a result line: {e}", path.display(), i + 1).into())
        })
        .collect()
}

/// Phase labels in first-seen order, and engines likewise.
fn axes(results: &[PhaseResult]) -> (Vec<String>, Vec<String>) {
    let mut phases: Vec<String> = Vec::new();
    let mut engines: Vec<String> = Vec::new();
    for r in results {
        if !phases.contains(&r.phase) {
            phases.push(r.phase.clone());
        }
        if !engines.contains(&r.engine) {
            engines.push(r.engine.clone());
        }
    }
    (phases, engines)
}

/// The last result of `engine` in `phase` (a file may hold several runs).
fn find<'a>(results: &'a [PhaseResult], phase: &str, engine: &str) -> Option<&'a PhaseResult> {
    results
        .iter()
        .rev()
        .find(|r| r.phase == phase && r.engine == engine)
}

/// A Markdown table comparing engines phase by phase; `×` is throughput
/// relative to the first engine in the same phase, `with settle` the
/// throughput counting the settle step (flush and background work left
/// behind) as part of the phase.
pub fn table(results: &[PhaseResult]) -> String {
    let (phases, engines) = axes(results);
    let mut s = String::from(
        "| phase | engine | ops/s | × | with settle | × | p50 us | p99 us | p99.9 us | write amp | write amp (io) | space amp | GC MB | settle s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let amp = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{a:.2}"));
    for p in &phases {
        let base = engines.iter().find_map(|e| find(results, p, e));
        for e in &engines {
            let Some(r) = find(results, p, e) else {
                continue;
            };
            if r.is_closed() {
                s += &format!(
                    "| {p} | {e} | | | | | | | | | | {} | | |\n",
                    amp(r.space_amp)
                );
                continue;
            }
            let rel = |of: fn(&PhaseResult) -> f64| {
                base.map(of)
                    .filter(|&b| b > 0.0)
                    .map_or("-".to_string(), |b| format!("{:.2}", of(r) / b))
            };
            s += &format!(
                "| {p} | {e} | {:.0} | {} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {:.0} | {} |\n",
                r.ops_per_sec,
                rel(|r| r.ops_per_sec),
                r.sustained_ops_per_sec(),
                rel(PhaseResult::sustained_ops_per_sec),
                r.latency.p50_us,
                r.latency.p99_us,
                r.latency.p999_us,
                amp(r.write_amp),
                amp(r.proc_write_amp),
                amp(r.space_amp),
                r.gc_bytes as f64 / 1048576.0,
                r.settle_s.map_or("-".to_string(), |d| format!("{d:.1}")),
            );
        }
    }
    s
}

/// A Markdown table of memory and CPU per phase: the process's peak
/// resident memory and the most the engine's in-memory index held
/// (UniKV, ICDE '20, Experiment 10), with the index per GiB of live data; the CPU
/// seconds of the phase's run and the cores they kept busy on average,
/// then of its settle step; `-` where not measured.
pub fn memory_table(results: &[PhaseResult]) -> String {
    let (phases, engines) = axes(results);
    let mut s = String::from(
        "| phase | engine | peak RSS MB | index MB | index MB per GiB live \
         | CPU s | cores busy | settle CPU s |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mb = |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0));
    for p in &phases {
        for e in &engines {
            let Some(r) = find(results, p, e).filter(|r| !r.is_closed()) else {
                continue;
            };
            let per_gib =
                r.index_memory_bytes
                    .filter(|_| r.live_bytes > 0)
                    .map_or("-".to_string(), |b| {
                        format!(
                            "{:.1}",
                            b as f64 / 1048576.0 / (r.live_bytes as f64 / 1073741824.0)
                        )
                    });
            let secs = |c: Option<f64>| c.map_or("-".to_string(), |c| format!("{c:.1}"));
            let cores = r
                .cpu_s
                .filter(|_| r.elapsed_s > 0.0)
                .map_or("-".to_string(), |c| format!("{:.2}", c / r.elapsed_s));
            s += &format!(
                "| {p} | {e} | {} | {} | {per_gib} | {} | {cores} | {} |\n",
                mb(r.peak_rss_bytes),
                mb(r.index_memory_bytes),
                secs(r.cpu_s),
                secs(r.settle_cpu_s),
            );
        }
    }
    s
}

/// Colours of engines in the plots, in first-seen order.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// A figure of a result, if it has one.
type Measure = dyn Fn(&PhaseResult) -> Option<f64>;

/// Draws the report: three grouped bar charts and a latency CDF of
/// `cdf_phase` (default: the last phase with latencies).
pub fn write_svg(results: &[PhaseResult], path: &Path, cdf_phase: Option<&str>) -> Result<()> {
    let (phases, engines) = axes(results);
    if phases.is_empty() {
        return Err("no results to draw".into());
    }
    let measured: Vec<String> = phases
        .iter()
        .filter(|p| *p != "closed" && !p.ends_with(".closed"))
        .cloned()
        .collect();
    let cdf_phase = match cdf_phase {
        Some(p) if measured.iter().any(|m| m == p) => p.to_string(),
        Some(p) => return Err(format!("no phase {p:?} in the results").into()),
        None => measured
            .iter()
            .rev()
            .find(|p| {
                engines
                    .iter()
                    .any(|e| find(results, p, e).is_some_and(|r| !r.latency.cdf.is_empty()))
            })
            .cloned()
            .unwrap_or_default(),
    };
    let width = (240 + 90 * phases.len() as u32 * engines.len().max(1) as u32 / 2).clamp(900, 2400);
    let root = SVGBackend::new(path, (width, 1500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((4, 1));
    let bars: [(&str, &Measure, &[String]); 3] = [
        (
            "throughput (ops/s)",
            &|r: &PhaseResult| (r.ops > 0).then_some(r.ops_per_sec),
            &measured,
        ),
        (
            // One yardstick for every engine: the peers have no engine
            // counters, so charting those for sluicedb would mix two.
            "write amplification (/proc/self/io, net of cancelled writeback)",
            &|r: &PhaseResult| r.proc_write_amp.or(r.write_amp),
            &measured,
        ),
        (
            "space amplification",
            &|r: &PhaseResult| r.space_amp,
            &phases,
        ),
    ];
    for (panel, (title, value, labels)) in panels.iter().zip(bars) {
        draw_bars(panel, title, labels, &engines, results, value)?;
    }
    draw_cdf(&panels[3], &cdf_phase, &engines, results)?;
    root.present()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

fn draw_bars(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    phases: &[String],
    engines: &[String],
    results: &[PhaseResult],
    value: &Measure,
) -> Result<()> {
    let max = phases
        .iter()
        .flat_map(|p| engines.iter().filter_map(move |e| find(results, p, e)))
        .filter_map(value)
        .fold(0.0f64, f64::max);
    let n = phases.len().max(1) as f64;
    let centres: Vec<f64> = (0..phases.len()).map(|i| i as f64 + 0.5).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        // Headroom above the bars for the legend.
        .build_cartesian_2d(0.0..n, 0.0..(max * 1.35).max(1e-9))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|&y| short_number(y))
        .draw()
        .map_err(|e| e.to_string())?;
    // Phase names under their groups, placed in pixels (a float axis has
    // no labels at chosen points).
    let (bx, by) = area.get_base_pixel();
    let font = ("sans-serif", 13)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (&x, p) in centres.iter().zip(phases) {
        let (px, py) = chart.backend_coord(&(x, 0.0));
        area.draw(&Text::new(p.clone(), (px - bx, py - by + 6), font.clone()))
            .map_err(|e| e.to_string())?;
    }
    let w = 0.8 / engines.len().max(1) as f64;
    for (j, e) in engines.iter().enumerate() {
        let colour = PALETTE[j % PALETTE.len()];
        chart
            .draw_series(phases.iter().enumerate().filter_map(|(i, p)| {
                let v = value(find(results, p, e)?)?;
                let x0 = i as f64 + 0.1 + j as f64 * w;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + w * 0.9, v)],
                    colour.filled(),
                ))
            }))
            .map_err(|e| e.to_string())?
            .label(e.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// `183000` as `183k`, `2.5` as `2.5`.
fn short_number(y: f64) -> String {
    if y.abs() >= 1e6 {
        format!("{:.1}M", y / 1e6)
    } else if y.abs() >= 1e3 {
        format!("{:.0}k", y / 1e3)
    } else {
        format!("{y:.1}")
    }
}

fn draw_cdf(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    phase: &str,
    engines: &[String],
    results: &[PhaseResult],
) -> Result<()> {
    let series: Vec<(usize, &String, &PhaseResult)> = engines
        .iter()
        .enumerate()
        .filter_map(|(j, e)| Some((j, e, find(results, phase, e)?)))
        .filter(|(_, _, r)| !r.latency.cdf.is_empty())
        .collect();
    let max_us = series
        .iter()
        .flat_map(|(_, _, r)| r.latency.cdf.iter().map(|&(_, us)| us))
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("latency CDF, {phase}"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d((0.1f64..max_us * 1.5).log_scale(), 0.0f64..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("microseconds")
        .x_label_formatter(&|&x| short_number(x))
        .y_desc("fraction of operations")
        .draw()
        .map_err(|e| e.to_string())?;
    for (j, e, r) in series {
        let colour = PALETTE[j % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(
                r.latency.cdf.iter().map(|&(q, us)| (us.max(0.1), q)),
                colour.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(e.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
