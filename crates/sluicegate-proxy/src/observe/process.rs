//! The process's own gauges (CPU time, resident memory, descriptors, start
//! time) read from /proc at scrape time, and `sluicegate_build_info`; none
//! of it is touched on the request path.

use std::fmt::Write as _;

/// The version, commit and compiler this binary was built from (the
/// commit and compiler as `build.rs` found them, empty when unknown).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const COMMIT: &str = env!("SLUICEGATE_COMMIT");
pub const RUSTC: &str = env!("SLUICEGATE_RUSTC");

/// What /proc tells of this process; `None` for what could not be read
/// (another OS, a /proc without the file).
#[derive(Debug, Default, PartialEq)]
pub struct Process {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<f64>,
}

impl Process {
    /// Reads this process's figures now.
    pub fn read() -> Process {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as u64;
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().and_then(stat_fields);
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            // The directory's own descriptor, open while it is read, is
            // not counted.
            .map(|d| d.count().saturating_sub(1) as u64);
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        Process {
            cpu_seconds: fields.map(|f| (f.utime + f.stime) as f64 / ticks),
            resident_bytes: fields.map(|f| f.rss_pages * page),
            virtual_bytes: fields.map(|f| f.vsize),
            open_fds,
            max_fds,
            start_time_seconds: match (fields, boot) {
                (Some(f), Some(b)) => Some(b as f64 + f.start_ticks as f64 / ticks),
                _ => None,
            },
        }
    }
}

/// The fields of /proc/self/stat used here.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StatFields {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses /proc/PID/stat: the command name (field 2) is in parentheses
/// and may hold spaces and parentheses, so fields are counted from the
/// last `)`.
fn stat_fields(s: &str) -> Option<StatFields> {
    let rest = &s[s.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let at = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime: at(14)?,
        stime: at(15)?,
        start_ticks: at(22)?,
        vsize: at(23)?,
        rss_pages: at(24)?,
    })
}

/// The boot time (`btime`, Unix seconds) in /proc/stat.
fn boot_time(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Writes the process families and `sluicegate_build_info`.
pub fn render(out: &mut String) {
    let p = Process::read();
    let mut family = |name: &str, kind: &str, help: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
    };
    family(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time spent, in seconds.",
        p.cpu_seconds.map(|v| v.to_string()),
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        p.resident_bytes.map(|v| v.to_string()),
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        p.virtual_bytes.map(|v| v.to_string()),
    );
    family(
        "process_open_fds",
        "gauge",
        "Open file descriptors.",
        p.open_fds.map(|v| v.to_string()),
    );
    family(
        "process_max_fds",
        "gauge",
        "The limit of open file descriptors (RLIMIT_NOFILE, soft).",
        p.max_fds.map(|v| v.to_string()),
    );
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds.",
        p.start_time_seconds.map(|v| format!("{v:.2}")),
    );
    let name = "sluicegate_build_info";
    let _ = writeln!(
        out,
        "# HELP {name} Always 1; the labels name the version, commit and compiler of this build.\n# TYPE {name} gauge\n{name}{{version=\"{}\",commit=\"{}\",rustc=\"{}\"}} 1",
        super::metrics::label(VERSION),
        super::metrics::label(COMMIT),
        super::metrics::label(RUSTC),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_tricky_name() {
        // Fields 14, 15, 22, 23, 24: utime, stime, starttime, vsize, rss.
        let line = "1234 (a) b (c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0 4200 1000000 77 18446744073709551615";
        let f = stat_fields(line).unwrap();
        assert_eq!(
            f,
            StatFields {
                utime: 250,
                stime: 50,
                start_ticks: 4200,
                vsize: 1_000_000,
                rss_pages: 77
            }
        );
        assert_eq!(stat_fields("1234 (a"), None);
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reads() {
        let p = Process::read();
        assert!(p.cpu_seconds.is_some_and(|c| c >= 0.0));
        assert!(p.resident_bytes.is_some_and(|r| r > 1024 * 1024));
        assert!(p.open_fds.is_some_and(|n| n >= 3));
        assert!(p.max_fds.is_some_and(|n| n >= p.open_fds.unwrap()));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_seconds.unwrap();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} {now}"
        );
    }
}
