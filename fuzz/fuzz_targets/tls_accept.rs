//! Fuzzes the TLS accept path: arbitrary bytes, cut into chunks of sizes
//! the input chooses, fed to a server connection with a listener's config
//! (certificate store, ALPN, resumption). It must never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluicegate_proxy::fuzzing::TlsAccept;

fn accept() -> &'static TlsAccept {
    static ACCEPT: OnceLock<TlsAccept> = OnceLock::new();
    ACCEPT.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("certs");
        TlsAccept::new(&dir.join("cert.pem"), &dir.join("key.pem")).expect("fuzz certificate")
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte sets the chunk size (1 to 256 bytes): records split
    // across reads, as a network would split them.
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    accept().feed(rest.chunks(usize::from(size) + 1));
});
