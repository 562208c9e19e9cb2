#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuseprof_fuzz::ranks(data));
