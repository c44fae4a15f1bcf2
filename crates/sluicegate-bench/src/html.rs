//! The HTML report: one self-contained file (inline SVG, no scripts, no
//! fonts or styles fetched) with the summary, the latency percentile curve,
//! throughput over time, latency over time and errors over time.

use std::fmt::Write as _;

use crate::report::{bytes, time, Run};

/// One line of a chart.
struct Series<'a> {
    name: &'a str,
    color: &'a str,
    points: Vec<(f64, f64)>,
}

/// A line chart; `log_x` plots x on a log10 scale (the percentile curve).
fn chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    log_x: bool,
    x_ticks: &[(f64, String)],
) -> String {
    const W: f64 = 720.0;
    const H: f64 = 300.0;
    const L: f64 = 70.0;
    const R: f64 = 45.0;
    const T: f64 = 30.0;
    const B: f64 = 45.0;
    let fx = |x: f64| if log_x { x.max(1.0).log10() } else { x };
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in all {
        x0 = x0.min(fx(x));
        x1 = x1.max(fx(x));
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    let y1 = nice_ceiling(y1);
    let px = |x: f64| L + (fx(x) - x0) / (x1 - x0) * (W - L - R);
    let py = |y: f64| H - B - y / y1 * (H - T - B);
    let mut o = String::new();
    let _ = write!(
        o,
        r##"<figure><svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{title}">"##
    );
    let _ = write!(
        o,
        r##"<text x="{L}" y="18" class="t">{}</text>"##,
        esc(title)
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        let _ = write!(
            o,
            r##"<line x1="{L}" x2="{}" y1="{py:.1}" y2="{py:.1}" class="g"/><text x="{}" y="{:.1}" class="a" text-anchor="end">{}</text>"##,
            W - R,
            L - 6.0,
            py(y) + 4.0,
            trim(y),
            py = py(y)
        );
    }
    for (x, label) in x_ticks {
        let _ = write!(
            o,
            r##"<line x1="{px:.1}" x2="{px:.1}" y1="{T}" y2="{}" class="g"/><text x="{px:.1}" y="{}" class="a" text-anchor="middle">{}</text>"##,
            H - B,
            H - B + 16.0,
            esc(label),
            px = px(*x)
        );
    }
    let _ = write!(
        o,
        r##"<text x="{}" y="{}" class="a" text-anchor="middle">{}</text><text x="14" y="{}" class="a" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"##,
        (L + W - R) / 2.0,
        H - 8.0,
        esc(x_label),
        (T + H - B) / 2.0,
        (T + H - B) / 2.0,
        esc(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        if !pts.is_empty() {
            let _ = write!(
                o,
                r##"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"##,
                s.color,
                pts.join(" ")
            );
        }
        let lx = L + 10.0 + i as f64 * 120.0;
        let _ = write!(
            o,
            r##"<rect x="{lx}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}" class="a">{}</text>"##,
            T + 2.0,
            s.color,
            lx + 16.0,
            T + 7.0,
            esc(s.name)
        );
    }
    o.push_str("</svg></figure>\n");
    o
}

/// The smallest 1, 2 or 5 times a power of ten at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn trim(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The report page.
pub fn render(run: &Run) -> String {
    let t = &run.totals;
    let m = &run.meta;
    let h = &t.latency;
    let mut o = String::new();
    o.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sluicegate bench report</title>\n<style>body{font:14px sans-serif;margin:2em;max-width:60em;color:#222}table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}th{text-align:left}svg{background:#fafafa;border:1px solid #ddd}.t{font-size:14px;font-weight:bold}.a{font-size:11px;fill:#444}.g{stroke:#e2e2e2}</style></head><body>\n");
    let _ = writeln!(o, "<h1>sluicegate bench</h1>");
    let _ = writeln!(
        o,
        "<p>{} &mdash; {} loop, {} connections, {} threads, keep-alive {}, pipeline {}{}{}</p>",
        m.urls.iter().map(|u| esc(u)).collect::<Vec<_>>().join(", "),
        esc(&m.mode),
        m.connections,
        m.threads,
        if m.keep_alive { "on" } else { "off" },
        m.pipeline,
        m.rate
            .map(|r| format!(", target rate {r:.0}/s"))
            .unwrap_or_default(),
        if m.parts > 1 {
            format!(", merged from {} parts", m.parts)
        } else {
            String::new()
        },
    );
    o.push_str("<table>\n");
    let e = &t.errors;
    let rows: Vec<(&str, String)> = vec![
        (
            "Requests per second",
            format!("{:.2}", run.requests_per_sec()),
        ),
        ("Complete responses", t.completed.to_string()),
        ("Requests sent", t.sent.to_string()),
        ("Duration", format!("{:.3} s", m.duration_secs)),
        ("Read", bytes(t.bytes_read as f64)),
        (
            "Latency p50 / p90 / p99 / p99.9 / max",
            format!(
                "{} / {} / {} / {} / {}",
                time(h.value_at_quantile(0.5) as f64),
                time(h.value_at_quantile(0.9) as f64),
                time(h.value_at_quantile(0.99) as f64),
                time(h.value_at_quantile(0.999) as f64),
                time(h.max() as f64)
            ),
        ),
        (
            "Latency mean &plusmn; sd",
            format!("{} &plusmn; {}", time(h.mean()), time(h.stdev())),
        ),
        (
            "Errors: connect / timeout / read / write / length",
            format!(
                "{} / {} / {} / {} / {}",
                e.connect, e.timeout, e.read, e.write, e.length
            ),
        ),
        ("Non-2xx responses", e.status.to_string()),
        (
            "Statuses",
            t.statuses
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    o.push_str("</table>\n");

    // Latency by percentile, x = 1/(1-q) on a log scale.
    let mut curve = Vec::new();
    if !h.is_empty() {
        for q in percentile_points() {
            curve.push((1.0 / (1.0 - q), h.value_at_quantile(q) as f64 / 1000.0));
        }
    }
    let ticks: Vec<(f64, String)> = [
        (0.0, "0%"),
        (0.9, "90%"),
        (0.99, "99%"),
        (0.999, "99.9%"),
        (0.9999, "99.99%"),
        (0.99999, "99.999%"),
    ]
    .iter()
    .map(|(q, l)| (1.0 / (1.0 - q), l.to_string()))
    .collect();
    o.push_str(&chart(
        "Latency by percentile",
        "percentile",
        "latency (ms)",
        &[Series {
            name: "latency",
            color: "#1f6fb4",
            points: curve,
        }],
        true,
        &ticks,
    ));

    let secs: Vec<f64> = t.seconds.iter().map(|s| s.at as f64).collect();
    let time_ticks: Vec<(f64, String)> = axis_ticks(secs.last().copied().unwrap_or(1.0));
    let per_sec = |f: &dyn Fn(&crate::stats::Second) -> f64| -> Vec<(f64, f64)> {
        t.seconds.iter().map(|s| (s.at as f64, f(s))).collect()
    };
    // Latency is plotted only for seconds that completed something: an
    // empty second has no latency, not a latency of zero.
    let lat_sec = |q: f64| -> Vec<(f64, f64)> {
        t.seconds
            .iter()
            .filter(|s| !s.latency.is_empty())
            .map(|s| (s.at as f64, s.latency.value_at_quantile(q) as f64 / 1000.0))
            .collect()
    };
    o.push_str(&chart(
        "Throughput over time",
        "seconds",
        "responses per second",
        &[Series {
            name: "responses/s",
            color: "#2a9d4b",
            points: per_sec(&|s| s.completed as f64),
        }],
        false,
        &time_ticks,
    ));
    o.push_str(&chart(
        "Latency over time",
        "seconds",
        "latency (ms)",
        &[
            Series {
                name: "p50",
                color: "#1f6fb4",
                points: lat_sec(0.5),
            },
            Series {
                name: "p99",
                color: "#d9822b",
                points: lat_sec(0.99),
            },
            Series {
                name: "max",
                color: "#b0413e",
                points: lat_sec(1.0),
            },
        ],
        false,
        &time_ticks,
    ));
    o.push_str(&chart(
        "Errors over time",
        "seconds",
        "per second",
        &[
            Series {
                name: "failed",
                color: "#b0413e",
                points: per_sec(&|s| s.errors.failed() as f64),
            },
            Series {
                name: "non-2xx",
                color: "#d9822b",
                points: per_sec(&|s| s.errors.status as f64),
            },
            Series {
                name: "timeouts",
                color: "#6b4fa0",
                points: per_sec(&|s| s.errors.timeout as f64),
            },
        ],
        false,
        &time_ticks,
    ));

    o.push_str("<h2>Percentiles</h2>\n<table><tr><th>percentile</th><td>latency</td><td>count at or below</td></tr>\n");
    for q in [0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0] {
        let v = h.value_at_quantile(q);
        let _ = writeln!(
            o,
            "<tr><th>{}%</th><td>{}</td><td>{}</td></tr>",
            trim_pct(q * 100.0),
            time(v as f64),
            h.count_between(0, v)
        );
    }
    o.push_str("</table>\n</body></html>\n");
    o
}

fn trim_pct(p: f64) -> String {
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Quantiles spread evenly on the 1/(1-q) log scale, up to 99.999%.
fn percentile_points() -> Vec<f64> {
    (0..=100)
        .map(|i| 1.0 - 10f64.powf(-(i as f64) * 5.0 / 100.0))
        .collect()
}

fn axis_ticks(last: f64) -> Vec<(f64, String)> {
    let step = nice_ceiling((last / 6.0).max(1.0));
    let mut v = Vec::new();
    let mut x = 0.0;
    while x <= last + 1e-9 {
        v.push((x, format!("{x:.0}")));
        x += step;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Meta;
    use crate::stats::{record, Second, Totals};

    #[test]
    fn page_is_self_contained_with_the_charts() {
        let mut totals = Totals::default();
        for at in 0..5 {
            let mut s = Second::new(at);
            for v in 1..=100 {
                record(&mut s.latency, v * 100);
            }
            s.completed = 100;
            s.errors.timeout = at;
            totals.add_second(&s);
        }
        totals.completed = 500;
        let run = Run {
            meta: Meta {
                urls: vec!["http://127.0.0.1:1/<x>".into()],
                mode: "closed".into(),
                connections: 4,
                threads: 1,
                keep_alive: true,
                pipeline: 1,
                rate: None,
                start_unix_micros: 0,
                duration_secs: 5.0,
                parts: 1,
            },
            totals,
        };
        let page = render(&run);
        assert!(page.starts_with("<!doctype html>"));
        for title in [
            "Latency by percentile",
            "Throughput over time",
            "Latency over time",
            "Errors over time",
        ] {
            assert!(page.contains(title), "{title}");
        }
        assert_eq!(page.matches("<polyline").count(), 1 + 1 + 3 + 3);
        // Offline: nothing is fetched.
        assert!(
            !page.contains("http://") || !page.contains("src="),
            "no external resources"
        );
        assert!(!page.contains("<script"));
        assert!(page.contains("&lt;x&gt;"), "URLs are escaped");
        assert!(page.contains("<th>Requests per second</th><td>100.00</td>"));
    }

    #[test]
    fn ceilings() {
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(1.2), 2.0);
        assert_eq!(nice_ceiling(37.0), 50.0);
        assert_eq!(nice_ceiling(75_000.0), 100_000.0);
    }
}
