//! Fuzzes the config loader: any text gives a config or positioned errors,
//! never a panic. Host names are never looked up (no DNS from a fuzzer).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(errors) = sluicegate_config::parse(text) {
            assert!(!errors.is_empty());
            for e in errors {
                assert!(e.line >= 1 && e.col >= 1, "{e}");
            }
        }
    }
});
