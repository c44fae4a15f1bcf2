//! Fuzzes the HTTP/1.1 upgrade path: a request head through the codec and
//! the upgrade decision (`upstream::tunnel::allowed` on a route's list the
//! first byte chooses), the bytes after it as the upstream's answer through
//! the response parser. An upgrade is only asked by an HTTP/1.1 request
//! whose Connection names `upgrade`, only taken without a body and for
//! protocols the route lists, never for h2c; a tunnel opens only on a
//! `101` naming its protocol for a request upgrading (see
//! `sluicegate_proxy::fuzzing::upgrade`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::upgrade;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = upgrade(data) {
        panic!("{e}");
    }
});
