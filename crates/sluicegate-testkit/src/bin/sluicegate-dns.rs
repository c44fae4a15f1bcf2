//! `sluicegate-dns`: runs the test kit's `DnsServer` on a free loopback port,
//! its table changed by commands read from standard input, for scripts
//! (bench/discovery-move) that are not Rust tests.
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::process::ExitCode;

use sluicegate_testkit::{DnsServer, Srv};

const USAGE: &str = "usage: sluicegate-dns

Starts an authoritative DNS server on 127.0.0.1 (UDP and TCP, one free port),
prints `listening on ADDR`, then reads one command a line from standard input
and answers each with one line (`ok`, a number, or `error: ...`):
  host NAME [IP ...]                  the A and AAAA answers of NAME (none: no such name)
  srv NAME PRIO:WEIGHT:PORT:TARGET ...  the SRV answer of NAME
  ttl SECONDS                         the TTL of every answer from now on (default 1)
  fail on|off                         while on, every query gets SERVFAIL
  queries                             the number of queries answered so far
It exits at the end of its input.";

fn main() -> ExitCode {
    if let Some(arg) = std::env::args().nth(1) {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        eprintln!("sluicegate-dns: unknown argument {arg:?}\n\n{USAGE}");
        return ExitCode::from(2);
    }
    let dns = DnsServer::start();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "listening on {}", dns.addr())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let reply = match command(&dns, &line) {
            Ok(reply) => reply,
            Err(e) => format!("error: {e}"),
        };
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

/// Applies one command line to the server's table.
fn command(dns: &DnsServer, line: &str) -> Result<String, String> {
    let mut words = line.split_whitespace();
    let Some(verb) = words.next() else {
        return Err("empty command".into());
    };
    let args: Vec<&str> = words.collect();
    match (verb, args.as_slice()) {
        ("host", [name, ips @ ..]) => {
            let ips = ips
                .iter()
                .map(|ip| ip.parse::<IpAddr>().map_err(|e| format!("{ip:?}: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            dns.set_host(name, &ips);
        }
        ("srv", [name, records @ ..]) => {
            let records = records
                .iter()
                .map(|r| srv(r))
                .collect::<Result<Vec<_>, _>>()?;
            dns.set_srv(name, &records);
        }
        ("ttl", [secs]) => dns.set_ttl(secs.parse().map_err(|e| format!("ttl {secs:?}: {e}"))?),
        ("fail", ["on"]) => dns.set_failing(true),
        ("fail", ["off"]) => dns.set_failing(false),
        ("queries", []) => return Ok(dns.queries().to_string()),
        _ => return Err(format!("unknown command {line:?}")),
    }
    Ok("ok".into())
}

/// `PRIO:WEIGHT:PORT:TARGET`.
fn srv(text: &str) -> Result<Srv, String> {
    let bad = || format!("{text:?}: want PRIO:WEIGHT:PORT:TARGET");
    let mut parts = text.splitn(4, ':');
    let mut num =
        || -> Result<u16, String> { parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad) };
    let (priority, weight, port) = (num()?, num()?, num()?);
    let target = parts.next().filter(|t| !t.is_empty()).ok_or_else(bad)?;
    Ok(Srv {
        priority,
        weight,
        port,
        target: target.to_string(),
    })
}
