//! The `sluicegate` binary: command line, logging, and the wiring of the
//! data plane (worker threads), the admin listener, reloads and signals.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sluicegate_config::{Config, LogFormat};
use sluicegate_control::history::Source;
use sluicegate_control::{Overrides, Reloader};
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter};

mod handover;
mod hugepages;

#[global_allocator]
static ALLOC: hugepages::HugePageAlloc = hugepages::HugePageAlloc;

#[derive(Parser)]
#[command(
    name = "sluicegate",
    version,
    about = "A high-performance HTTP API gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the gateway.
    Run(RunArgs),
    /// Check a config file; prints FILE:LINE:COL: problem for each problem.
    Validate {
        /// The YAML config file.
        file: PathBuf,
    },
    /// Generate HTTP load and report latencies (`bench --help`), or merge
    /// the JSON parts of a distributed run (`bench merge`).
    Bench(Box<sluicegate_bench::BenchArgs>),
    /// Print the version.
    Version,
}

#[derive(Args)]
struct RunArgs {
    /// The YAML config file.
    #[arg(short, long)]
    config: PathBuf,
    /// Worker threads (overrides `workers`).
    #[arg(long, visible_alias = "limit-cpus")]
    workers: Option<usize>,
    /// Client connections open at once (overrides `limits.max_connections`).
    #[arg(long, visible_alias = "limit-conn")]
    max_connections: Option<usize>,
    /// error, warn, info, debug or trace (overrides `log.level`).
    #[arg(long)]
    log_level: Option<String>,
    /// Take over the listening sockets of the gateway running with this
    /// handover socket, which then drains and exits (graceful restart).
    #[arg(long)]
    upgrade: bool,
    /// The Unix socket for handovers (default: in the temporary directory,
    /// named after the config file's path).
    #[arg(long)]
    handover_socket: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("sluicegate {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Validate { file } => match sluicegate_config::load(&file)
            .map_err(|e| e.to_string())
            .and_then(|cfg| {
                // The files the config names are read as a start would.
                sluicegate_proxy::check_tls_files(&cfg)
                    .map(|()| cfg)
                    .map_err(|e| format!("{}: {e}", file.display()))
            }) {
            Ok(cfg) => {
                println!(
                    "{}: ok ({} services, {} routes)",
                    file.display(),
                    cfg.services.len(),
                    cfg.routes.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => run(args),
        Command::Bench(args) => sluicegate_bench::main(*args),
    }
}

const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

fn level_filter(level: &str) -> EnvFilter {
    EnvFilter::new(format!("{level},h2=warn"))
}

fn run(args: RunArgs) -> ExitCode {
    if let Some(l) = &args.log_level {
        if !LEVELS.contains(&l.as_str()) {
            eprintln!(
                "--log-level: expected one of {}, found {l:?}",
                LEVELS.join(", ")
            );
            return ExitCode::FAILURE;
        }
    }
    if args.workers == Some(0) || args.max_connections == Some(0) {
        eprintln!("--workers and --max-connections must be positive");
        return ExitCode::FAILURE;
    }
    let overrides = Overrides {
        workers: args.workers,
        max_connections: args.max_connections,
        log_level: args.log_level.clone(),
    };
    let stamp = sluicegate_control::reload::stamp(&args.config);
    let (mut cfg, text) = match load_with_text(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    overrides.apply(&mut cfg);
    let (filter_layer, filter_handle) = reload::Layer::new(level_filter(&cfg.log.level));
    // One logger, to stderr: text lines, or (`log.format: json`) one JSON
    // object a line with the event's fields at the top level.
    let format = cfg.log.format;
    let (text_layer, json_layer) = match format {
        LogFormat::Text => (
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            ),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            ),
        ),
    };
    tracing_subscriber::registry()
        .with(filter_layer)
        .with(text_layer)
        .with(json_layer)
        .init();
    let handover_path = args
        .handover_socket
        .clone()
        .unwrap_or_else(|| handover::default_path(&args.config));
    let handover = Handover {
        path: handover_path,
        upgrade: args.upgrade,
    };
    match serve(
        args.config,
        (cfg, stamp, text),
        overrides,
        filter_handle,
        handover,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("sluicegate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The config at `path` and the text it was read from.
fn load_with_text(
    path: &std::path::Path,
) -> Result<(Config, String), sluicegate_config::LoadError> {
    use sluicegate_config::LoadError;
    let text = std::fs::read_to_string(path).map_err(|error| LoadError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    match sluicegate_config::parse(&text) {
        Ok(cfg) => Ok((cfg, text)),
        Err(errors) => Err(LoadError::Invalid {
            path: path.to_path_buf(),
            errors,
        }),
    }
}

type FilterHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Where the handover socket is, and whether to take over from the
/// process serving it.
struct Handover {
    path: PathBuf,
    upgrade: bool,
}

/// `loaded` is the config, the file's stamp taken before reading it, and
/// the text read.
fn serve(
    path: PathBuf,
    loaded: (Config, Option<sluicegate_control::reload::Stamp>, String),
    overrides: Overrides,
    filter: FilterHandle,
    handover: Handover,
) -> Result<(), String> {
    let (cfg, stamp, text) = loaded;
    // Token files are read before anything is bound: a missing one stops
    // the start with its path.
    let tokens = match &cfg.admin {
        Some(a) => sluicegate_control::Tokens::load(a)?,
        None => sluicegate_control::Tokens::default(),
    };
    let workers = cfg
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let shared = sluicegate_proxy::Shared::new(&cfg)?;
    let cfg_redis = cfg.cluster.redis.clone();
    let cfg_tracing = cfg.tracing.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    // Signal handlers go in before any socket is bound: a SIGHUP or SIGTERM
    // sent as soon as the port answers must reload or drain, not kill.
    let (mut hup, mut usr2, mut term, mut int) = {
        let _rt = rt.enter();
        let sig = |k| signal(k).map_err(|e| format!("signal handler: {e}"));
        (
            sig(SignalKind::hangup())?,
            sig(SignalKind::user_defined2())?,
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
        )
    };
    let mut taken = if handover.upgrade {
        Some(handover::take(&handover.path).map_err(|e| format!("--upgrade: {e}"))?)
    } else {
        None
    };
    // The admin listener binds before the workers so a bad address fails
    // early (or comes from the process this one takes over from).
    let admin_std = match &cfg.admin {
        Some(a) => match taken.as_mut().and_then(|t| t.admin.take()) {
            Some(l) if l.local_addr().ok() == Some(a.listen) => Some(l),
            _ => Some(
                std::net::TcpListener::bind(a.listen)
                    .map_err(|e| format!("admin listen {}: {e}", a.listen))?,
            ),
        },
        None => None,
    };
    // Its certificates are read before the workers start, as theirs are.
    let admin_tls = match cfg.admin.as_ref().and_then(|a| a.tls.clone()) {
        Some(t) => Some(sluicegate_control::AdminTls::new(t)?),
        None => None,
    };
    let admin_dup = match &admin_std {
        Some(l) => Some(l.try_clone().map_err(|e| format!("admin listener: {e}"))?),
        None => None,
    };
    let admin = match admin_std {
        Some(l) => {
            let _rt = rt.enter();
            l.set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(l))
                .map(Some)
                .map_err(|e| format!("admin listener: {e}"))?
        }
        None => None,
    };
    let (gateway, predecessor) = match taken {
        Some(t) => {
            // The old process's state before a request is served here.
            take_state(&shared, &t);
            let g = sluicegate_proxy::Gateway::start_inherited(shared.clone(), t.data, workers)
                .map_err(|e| e.to_string())?;
            (g, Some(t.conn))
        }
        None => {
            let g = sluicegate_proxy::Gateway::start_config(shared.clone(), &cfg, workers)
                .map_err(|e| e.to_string())?;
            (g, None)
        }
    };
    if let Some(a) = &cfg.admin {
        if tokens.is_empty() {
            tracing::warn!(
                admin = %a.listen,
                "the admin API asks for no token (admin.tokens is empty): it listens on loopback only"
            );
        }
    }
    tracing::info!(
        listen = ?gateway.local_addrs,
        admin = ?cfg.admin.as_ref().map(|a| a.listen),
        workers,
        routes = cfg.routes.len(),
        services = cfg.services.len(),
        upgraded = predecessor.is_some(),
        "sluicegate started"
    );
    if let Some(conn) = predecessor {
        // Serving: the old process may stop accepting. Its handover socket
        // is replaced by ours below.
        handover::ready(conn).map_err(|e| format!("--upgrade: {e}"))?;
        let _ = std::fs::remove_file(&handover.path);
    }
    let (handed_tx, mut handed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut gateway = gateway;
    let offered: handover::Offered = std::sync::Arc::new(std::sync::Mutex::new(Some((
        gateway.take_listeners(),
        admin_dup,
    ))));
    let hooks = state_hooks(&shared, gateway.accept_switch());
    let serves_handover = match handover::serve(&handover.path, offered.clone(), hooks, move || {
        let _ = handed_tx.send(());
    }) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "no graceful restart for this process");
            false
        }
    };
    let watch = cfg.reload.clone();
    let started_format = cfg.log.format;
    // The Redis plane follows `cluster.redis` through reloads.
    let (redis_tx, redis_rx) = tokio::sync::watch::channel(cfg_redis);
    let on_apply = Box::new(move |c: &Config| {
        if let Err(e) = filter.reload(level_filter(&c.log.level)) {
            tracing::warn!(error = %e, "log level not changed");
        }
        if c.log.format != started_format {
            tracing::warn!(
                format = ?c.log.format,
                "log.format changed: the log keeps its format until a restart"
            );
        }
        redis_tx.send_if_modified(|r| {
            let changed = *r != c.cluster.redis;
            if changed {
                r.clone_from(&c.cluster.redis);
            }
            changed
        });
    });
    let read_only = cfg.admin.as_ref().is_some_and(|a| a.read_only);
    let source = cfg.config_source.clone();
    let reloader = std::sync::Arc::new(std::sync::Mutex::new(Reloader::new(
        path,
        shared.clone(),
        overrides,
        (cfg, stamp, text),
        on_apply,
    )));
    Reloader::locked(&reloader).on_settled(Box::new(give_back_free_memory));
    // In etcd mode the cached config is applied now, and the watch starts.
    let etcd_source = source.map(|sluicegate_config::ConfigSource::Etcd(e)| e);
    let etcd = etcd_source
        .clone()
        .map(|e| sluicegate_control::etcd::start(&reloader, e, rt.handle()));
    // Canary rollouts: judged and written on the control runtime (in a
    // fleet, by the gateway that leads it).
    sluicegate_control::canary::start(&reloader, shared.clone(), etcd_source, rt.handle());
    give_back_free_memory();
    let mut handed_over = false;
    let (plane, background) = rt.block_on(async {
        let mut background = Vec::new();
        if let Some(listener) = admin {
            let setup = sluicegate_control::AdminSetup {
                shared: shared.clone(),
                reloader: reloader.clone(),
                tokens,
                read_only,
                etcd,
                tls: admin_tls,
            };
            background.push(tokio::spawn(sluicegate_control::http::serve(
                listener, setup,
            )));
        }
        // Health checks run here, once per process, not in the workers.
        background.push(tokio::spawn(sluicegate_proxy::run_health_checks(
            shared.clone(),
        )));
        // And DNS discovery of endpoints (a no-op without names to resolve).
        background.push(tokio::spawn(sluicegate_proxy::discovery::run(
            shared.clone(),
        )));
        // And the key sets of OpenID Connect issuers (`jwt.issuers`).
        background.push(tokio::spawn(sluicegate_proxy::discovery::jwks::run(
            shared.clone(),
        )));
        // And of endpoints registered in etcd (`discovery.etcd`).
        background.push(tokio::spawn(sluicegate_control::etcd::discover::run(
            shared.clone(),
        )));
        // So do the leases of global limits from Redis.
        let s = shared.clone();
        let plane = sluicegate_proxy::cluster::spawn(move || s.globals(), redis_rx);
        // And the export of sampled requests' spans.
        if let Some(t) = cfg_tracing {
            background.push(tokio::spawn(sluicegate_proxy::run_trace_export(
                shared.clone(),
                t,
            )));
        }
        let mut tick = tokio::time::interval(watch.poll_interval.max(Duration::from_millis(50)));
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    Reloader::locked(&reloader).reload(Source::Sighup);
                    give_back_free_memory();
                }
                _ = usr2.recv() => {
                    Reloader::locked(&reloader).reload(Source::Sigusr2);
                    give_back_free_memory();
                }
                _ = term.recv() => { tracing::info!("SIGTERM: draining"); break; }
                _ = int.recv() => { tracing::info!("SIGINT: draining"); break; }
                Some(()) = handed_rx.recv() => {
                    tracing::info!("upgraded: draining");
                    handed_over = true;
                    break;
                }
                _ = tick.tick(), if watch.watch => {
                    if Reloader::locked(&reloader).check() {
                        give_back_free_memory();
                    }
                }
            }
        }
        Ok::<_, String>((plane, background))
    })?;
    // Close the duplicates first: with them open the listening sockets
    // would keep queueing connections nobody accepts.
    drop(offered.lock().map(|mut o| o.take()));
    rt.block_on(async {
        // The admin API (its listener may be a successor's now) and the
        // health checks stop; the Redis plane keeps leasing for the
        // requests that drain, then gives back what this process holds.
        for t in background {
            t.abort();
        }
        let _ = tokio::task::spawn_blocking(move || gateway.shutdown()).await;
        plane.stop().await;
    });
    // The socket file is ours unless a successor has replaced it.
    if serves_handover && !handed_over {
        let _ = std::fs::remove_file(&handover.path);
    }
    tracing::info!("sluicegate stopped");
    Ok(())
}

/// Imports the state of the process taken over from, if it hands it over;
/// without it (an older version, or a document refused) the limits,
/// quotas, breakers and health start from zero, with a warning.
fn take_state(shared: &sluicegate_proxy::Shared, taken: &handover::Taken) {
    if !taken.state {
        tracing::warn!(
            "the running gateway does not hand over its state (an older version): \
             rate limits, quotas, circuit breakers and health start from zero"
        );
        return;
    }
    let doc = match handover::fetch_state(&taken.conn) {
        Ok(doc) => doc,
        Err(e) => {
            tracing::warn!(error = %e, "no state from the running gateway: starting from zero");
            return;
        }
    };
    match shared.import_state(&doc) {
        Ok(n) => tracing::info!(
            bytes = doc.len(),
            endpoints = n.endpoints,
            routes = n.routes,
            clients = n.clients,
            apps = n.apps,
            dropped = n.dropped,
            "state taken over from the running gateway"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "state from the running gateway refused: starting from zero"
        ),
    }
}

/// What this process does when a successor asks for its state: stop
/// accepting, then capture it; and accept again if the successor fails.
fn state_hooks(
    shared: &std::sync::Arc<sluicegate_proxy::Shared>,
    switch: sluicegate_proxy::AcceptSwitch,
) -> handover::Hooks {
    let shared = shared.clone();
    let hold = switch.clone();
    handover::Hooks {
        capture: Box::new(move || {
            hold.hold();
            let (doc, n) = shared.export_state();
            if n.left_out > 0 {
                tracing::warn!(
                    left_out = n.left_out,
                    "state document full: some per-client limits are not handed over"
                );
            }
            tracing::info!(
                entries = n.entries,
                bytes = n.bytes,
                "stopped accepting; state captured for the new process"
            );
            doc
        }),
        resume: Box::new(move || {
            tracing::warn!("upgrade failed after the state was captured: accepting again");
            switch.resume();
        }),
    }
}

/// Hands the heap pages freed by reading and compiling a config back to the
/// system. A big config (a million apps) leaves hundreds of megabytes of
/// parse trees freed between the long-lived tables; the allocators keep
/// such pages until asked.
fn give_back_free_memory() {
    // SAFETY: mi_collect only walks mimalloc's own free pages (this
    // thread's heap, where a config is read and compiled, and abandoned
    // ones) and returns them to the system; it touches no live block.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    // The C library's heap: what native code (the TLS library) allocates.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // takes the allocator's locks and touches no memory the program owns.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
