//! The Metal path's gate: off unless the caller's settings enable it (the
//! command maps `GRAPHC_METAL=1`, read by value: another value is an error
//! naming it), and on a system without Metal the reason — each an error,
//! never a panic. The host itself is type-checked by
//! `tools/metal-typecheck` and run by `tools/metal-check` on a Mac.

use graphc_gpu::{metal_rt, GpuSettings};

#[test]
fn metal_is_off_unless_enabled_and_says_why_not() {
    let off = metal_rt::device_check(&GpuSettings::default()).unwrap_err().to_string();
    assert!(off.contains("metal is off") && off.contains("GRAPHC_METAL=1"), "{off}");
    let on = GpuSettings { metal: true, ..Default::default() };
    let graph = graphc_ir::Graph::new("empty");
    match (metal_rt::device_check(&on), graphc_gpu::open::open("metal", &graph, &NoWeights, &on)) {
        (Ok(()), _) if cfg!(target_os = "macos") => eprintln!("Metal is enabled on this Mac"),
        (Err(e), Err(opened)) => {
            let e = e.to_string();
            assert!(!cfg!(target_os = "macos") && e == "metal: no device: Metal needs macOS", "{e}");
            assert_eq!(opened.to_string(), e);
        }
        (check, opened) => panic!("device_check {check:?} but open {:?}", opened.map(|g| g.label())),
    }
}

/// The variable is read by value: `1` on, `0` off, anything else an error
/// naming it. (One process for the test: it sets the variable.)
#[test]
fn the_metal_variable_is_read_by_value() {
    std::env::remove_var("GRAPHC_METAL");
    assert!(!GpuSettings::from_env().unwrap().metal);
    std::env::set_var("GRAPHC_METAL", "0");
    assert!(!GpuSettings::from_env().unwrap().metal);
    std::env::set_var("GRAPHC_METAL", "1");
    assert!(GpuSettings::from_env().unwrap().metal);
    std::env::set_var("GRAPHC_METAL", "yes");
    let bad = GpuSettings::from_env().unwrap_err().to_string();
    assert!(bad.contains("GRAPHC_METAL=\"yes\"") && bad.contains("1 (on) or 0 (off)"), "{bad}");
    std::env::remove_var("GRAPHC_METAL");
}

struct NoWeights;
impl graphc_backends::WeightSource for NoWeights {
    fn weight(&self, _name: &str) -> Option<graphc_backends::WeightRef<'_>> {
        None
    }
}
