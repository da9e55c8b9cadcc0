//! Write each fuzz target's seed corpus: `cargo run -p graphc-tests --example fuzz_seeds -- DIR`
//! (used by `fuzz/run.sh`).
fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    graphc_tests::fuzz::write_seeds(std::path::Path::new(&dir)).expect("writing the seeds");
}
