//! The make-style depfile parser on arbitrary text: never panics, and every
//! prerequisite it returns is non-empty and listed once.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let deps = scenerun::warm::depfile::parse(&text);
    for (i, d) in deps.iter().enumerate() {
        assert!(!d.is_empty(), "an empty prerequisite");
        assert!(!deps[..i].contains(d), "a prerequisite listed twice");
    }
});
