//! Fuzzes the gateway's HTTP/2 server side: arbitrary bytes as a client's
//! connection (the preface added unless they start with `P`), read in
//! pieces of a size the first byte chooses, through the flood watcher into
//! the `h2` server; each stream accepted has its head laid out as the
//! protocol-neutral head, and is answered through an `Exchange` as the
//! gateway answers (a status, fields and a body; informational heads, a
//! body to its end, trailers). It must never panic or spin, each head
//! must be laid out within its buffer, and what goes out must be whole,
//! well-placed frames, never HTTP/1.1 text (see `H2Session::check`).
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
