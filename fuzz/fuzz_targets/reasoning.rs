#![no_main]
// The body is graphc_tests::fuzz::reasoning (shared with tests/tests/fuzz_regressions.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| graphc_tests::fuzz::reasoning(data));
