//! The Metal path's gate, read by value: off unless `GRAPHC_METAL=1`, a bad
//! value an error naming it, and on a system without Metal the reason —
//! each an error, never a panic. (One test in its own process: it sets the
//! variable.) The host itself is type-checked by `tools/metal-typecheck`
//! and run by `tools/metal-check` on a Mac.

use graphc_gpu::metal_rt;

#[test]
fn the_metal_flag_is_read_by_value_and_says_why_not() {
    std::env::remove_var("GRAPHC_METAL");
    let off = metal_rt::device_check().unwrap_err().to_string();
    assert!(off.contains("metal is off") && off.contains("GRAPHC_METAL=1"), "{off}");
    std::env::set_var("GRAPHC_METAL", "0");
    assert_eq!(metal_rt::device_check().unwrap_err().to_string(), off);
    std::env::set_var("GRAPHC_METAL", "yes");
    let bad = metal_rt::device_check().unwrap_err().to_string();
    assert!(bad.contains("GRAPHC_METAL=\"yes\"") && bad.contains("1 (on) or 0 (off)"), "{bad}");
    std::env::set_var("GRAPHC_METAL", "1");
    let graph = graphc_ir::Graph::new("empty");
    match (metal_rt::device_check(), graphc_gpu::exec::open("metal", &graph, &NoWeights)) {
        (Ok(()), _) if cfg!(target_os = "macos") => eprintln!("Metal is enabled on this Mac"),
        (Err(e), Err(opened)) => {
            let e = e.to_string();
            assert!(!cfg!(target_os = "macos") && e == "metal: no device: Metal needs macOS", "{e}");
            assert_eq!(opened.to_string(), e);
        }
        (check, opened) => panic!("device_check {check:?} but open {:?}", opened.map(|g| g.label())),
    }
}

struct NoWeights;
impl graphc_backends::WeightSource for NoWeights {
    fn weight(&self, _name: &str) -> Option<graphc_backends::WeightRef<'_>> {
        None
    }
}
