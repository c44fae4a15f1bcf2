//! Fuzzes the gateway's HTTP/2 server side: arbitrary bytes as a client's
//! connection (the preface added unless they start with `P`), read in
//! pieces of a size the first byte chooses, through the flood watcher into
//! the `h2` server; each stream accepted is written as HTTP/1.1 text for
//! the codec and answered through an `Exchange` with a fixed answer. It
//! must never panic or spin, the codec must read each stream's head as
//! written, and what goes out must be whole, well-placed frames (see
//! `H2Session::check`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::{h2_session, H2_MAX_ROUNDS};

fuzz_target!(|data: &[u8]| {
    let s = h2_session(data);
    assert!(
        s.rounds < H2_MAX_ROUNDS,
        "never idle after {} rounds",
        s.rounds
    );
    if let Err(e) = s.check() {
        panic!("{e}");
    }
});
