//! `sluicegate-upstream`: runs the test kit's `TestUpstream` in the foreground
//! until killed, as the local upstream of the README quickstart.
//!
//! Usage: `sluicegate-upstream --listen 127.0.0.1:9001 [--id NAME]`
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;

use sluicegate_testkit::TestUpstream;

const USAGE: &str = "usage: sluicegate-upstream --listen ADDR:PORT [--id NAME]

Serves HTTP/1.1 test replies steered by the query string, e.g.
  /echo            the request as JSON
  /?status=503     that status
  /?delay=100      wait 100 ms first
  /?size=1000      a 1000-byte body
  /?chunked=1      a chunked body
  /?close=1        close after replying
Responses carry x-upstream-id: NAME when --id is given.";

fn main() -> ExitCode {
    let mut listen: Option<SocketAddr> = None;
    let mut id: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match flag.as_str() {
            "--listen" | "-l" => match value().map(|v| v.parse::<SocketAddr>()) {
                Some(Ok(addr)) => listen = Some(addr),
                Some(Err(e)) => return fail(&format!("bad --listen address: {e}")),
                None => return fail("--listen needs ADDR:PORT"),
            },
            "--id" => match value() {
                Some(v) => id = Some(v),
                None => return fail("--id needs a NAME"),
            },
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return fail(&format!("unknown argument {other:?}")),
        }
    }
    let Some(listen) = listen else {
        return fail("--listen is required");
    };
    let upstream = match TestUpstream::start_on(listen, id.as_deref()) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("sluicegate-upstream: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match upstream.id() {
        Some(id) => println!("sluicegate-upstream {id} listening on {}", upstream.addr()),
        None => println!("sluicegate-upstream listening on {}", upstream.addr()),
    }
    loop {
        std::thread::park();
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("sluicegate-upstream: {msg}\n\n{USAGE}");
    ExitCode::from(2)
}
