//! A small authoritative DNS server for tests, on 127.0.0.1 over UDP and
//! TCP on one free port: it answers A, AAAA and SRV queries from a table
//! the test changes while the gateway runs, with a TTL the test sets, and
//! can be told to fail (SERVFAIL) to test that the last good answer stays.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// An SRV record: priority, weight, port, target host.
#[derive(Debug, Clone)]
pub struct Srv {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    pub target: String,
}

#[derive(Default)]
struct Table {
    hosts: HashMap<String, Vec<IpAddr>>,
    srv: HashMap<String, Vec<Srv>>,
    ttl: u32,
    failing: bool,
}

struct State {
    table: Mutex<Table>,
    stop: AtomicBool,
    queries: AtomicU64,
}

/// The running server; stopped when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    state: Arc<State>,
    threads: Vec<JoinHandle<()>>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl DnsServer {
    /// Starts on 127.0.0.1, UDP and TCP on the same free port, with an
    /// empty table and a TTL of 1 s.
    pub fn start() -> DnsServer {
        let (udp, tcp) = (0..50)
            .find_map(|_| {
                let udp = UdpSocket::bind("127.0.0.1:0").ok()?;
                let tcp = TcpListener::bind(udp.local_addr().ok()?).ok()?;
                Some((udp, tcp))
            })
            .expect("no free port for the test DNS server");
        let addr = udp.local_addr().unwrap();
        let state = Arc::new(State {
            table: Mutex::new(Table {
                ttl: 1,
                ..Table::default()
            }),
            stop: AtomicBool::new(false),
            queries: AtomicU64::new(0),
        });
        udp.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        tcp.set_nonblocking(true).unwrap();
        let s = state.clone();
        let t1 = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !s.stop.load(Ordering::Relaxed) {
                let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(reply) = answer(&s, &buf[..n]) {
                    let _ = udp.send_to(&reply, peer);
                }
            }
        });
        let s = state.clone();
        let t2 = std::thread::spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((conn, _)) => {
                        let s = s.clone();
                        std::thread::spawn(move || serve_tcp(&s, conn));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        DnsServer {
            addr,
            state,
            threads: vec![t1, t2],
        }
    }

    /// Where it listens (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the A and AAAA answers of `host` (empty: the name does not exist).
    pub fn set_host(&self, host: &str, ips: &[IpAddr]) {
        let mut t = self.state.table.lock().unwrap();
        if ips.is_empty() {
            t.hosts.remove(&key(host));
        } else {
            t.hosts.insert(key(host), ips.to_vec());
        }
    }

    /// Sets the SRV answer of `name`.
    pub fn set_srv(&self, name: &str, records: &[Srv]) {
        let mut t = self.state.table.lock().unwrap();
        t.srv.insert(key(name), records.to_vec());
    }

    /// The TTL of every answer from now on.
    pub fn set_ttl(&self, secs: u32) {
        self.state.table.lock().unwrap().ttl = secs;
    }

    /// While on, every query gets SERVFAIL.
    pub fn set_failing(&self, failing: bool) {
        self.state.table.lock().unwrap().failing = failing;
    }

    /// Queries answered so far.
    pub fn queries(&self) -> u64 {
        self.state.queries.load(Ordering::Relaxed)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Serves DNS over TCP (two-byte length prefix) on one connection.
fn serve_tcp(s: &State, mut conn: TcpStream) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    loop {
        let mut len = [0u8; 2];
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if conn.read_exact(&mut buf).is_err() {
            return;
        }
        let Some(reply) = answer(s, &buf) else { return };
        let mut out = (reply.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&reply);
        if conn.write_all(&out).is_err() {
            return;
        }
    }
}

/// The reply to one query message, from the table.
fn answer(s: &State, query: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(query).ok()?;
    s.queries.fetch_add(1, Ordering::Relaxed);
    let mut reply = Message::new();
    reply
        .set_id(req.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_authoritative(true)
        .set_recursion_desired(req.recursion_desired());
    let t = s.table.lock().unwrap();
    let mut code = ResponseCode::NoError;
    for q in req.queries() {
        reply.add_query(q.clone());
        if t.failing {
            code = ResponseCode::ServFail;
            continue;
        }
        let name = key(&q.name().to_utf8());
        let known = t.hosts.contains_key(&name) || t.srv.contains_key(&name);
        if !known {
            code = ResponseCode::NXDomain;
            continue;
        }
        let rname = q.name().clone();
        match q.query_type() {
            RecordType::A | RecordType::AAAA => {
                for ip in t.hosts.get(&name).into_iter().flatten() {
                    let rdata = match (ip, q.query_type()) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                        _ => continue,
                    };
                    reply.add_answer(Record::from_rdata(rname.clone(), t.ttl, rdata));
                }
            }
            RecordType::SRV => {
                for r in t.srv.get(&name).into_iter().flatten() {
                    let target = Name::from_ascii(format!("{}.", key(&r.target))).ok()?;
                    let rdata = RData::SRV(SRV::new(r.priority, r.weight, r.port, target));
                    reply.add_answer(Record::from_rdata(rname.clone(), t.ttl, rdata));
                }
            }
            _ => {}
        }
    }
    reply.set_response_code(code);
    reply.to_vec().ok()
}
