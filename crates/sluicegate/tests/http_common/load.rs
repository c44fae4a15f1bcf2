//! Load for the discovery tests: clients sending requests over keep-alive
//! connections until stopped, counting answers by the id of the upstream
//! that gave them (or by status, or by error).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sluicegate_testkit::KeepAliveClient;

/// The id of the upstream that answered (`x-upstream-id`), or `-`.
pub fn id(resp: &sluicegate_testkit::Response) -> String {
    resp.header("x-upstream-id").unwrap_or("-").to_string()
}

/// Clients sending requests until stopped, counting answers by upstream
/// id (or by status when not 200) and I/O errors.
pub struct Load {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<HashMap<String, u64>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(addr: SocketAddr, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let threads = (0..clients)
            .map(|_| {
                let (stop, seen) = (stop.clone(), seen.clone());
                thread::spawn(move || {
                    let mut client = KeepAliveClient::connect(addr).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        let key = match client.get("/x") {
                            Ok(r) if r.status == 200 => id(&r),
                            Ok(r) => format!("status {}", r.status),
                            Err(e) => {
                                client = KeepAliveClient::connect(addr).unwrap();
                                format!("error {e}")
                            }
                        };
                        *seen.lock().unwrap().entry(key).or_default() += 1;
                        thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        Load {
            stop,
            seen,
            threads,
        }
    }

    /// The counts so far.
    pub fn seen(&self) -> HashMap<String, u64> {
        self.seen.lock().unwrap().clone()
    }

    /// Forgets the counts so far.
    pub fn reset(&self) {
        self.seen.lock().unwrap().clear();
    }

    pub fn count(&self, key: &str) -> u64 {
        self.seen.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    pub fn finish(self) -> HashMap<String, u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let seen = self.seen.lock().unwrap();
        seen.clone()
    }
}
