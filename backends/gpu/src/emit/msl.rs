//! MSL through naga: the kernel's WGSL is parsed and validated by naga, and
//! naga's MSL writer translates that same module. There is no hand-written
//! Metal spelling to drift from the WGSL one; what Metal runs is what the
//! WGSL validator accepted. (Nothing on Linux compiles MSL; golden
//! snapshots and naga's validation are what is checked here.)

use super::EmitError;
use crate::kir::Kernel;
use naga::back::msl;

/// The validated naga module of a kernel's WGSL (also what `wgpu_rt` and the
/// tests validate every kernel with).
pub fn validate(kernel: &Kernel, wgsl: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), EmitError> {
    let naga_err = |message: String| EmitError::Naga { kernel: kernel.name.clone(), message };
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| naga_err(e.emit_to_string(wgsl)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| naga_err(e.emit_to_string(wgsl)))?;
    Ok((module, info))
}

/// Buffer `i` of the kernel is Metal buffer slot `i`, the parameters the slot
/// after them; runtime-sized arrays take their lengths from slot 30.
pub fn emit(kernel: &Kernel) -> Result<String, EmitError> {
    let wgsl = super::wgsl::emit(kernel);
    let (module, info) = validate(kernel, &wgsl)?;
    let mut resources = msl::EntryPointResources { sizes_buffer: Some(30), ..Default::default() };
    let n_bindings = kernel.buffers.len() + usize::from(!kernel.params.is_empty());
    for binding in 0..n_bindings {
        let mutable = kernel.buffers.get(binding).is_some_and(|b| b.writable);
        resources.resources.insert(
            naga::ResourceBinding { group: 0, binding: binding as u32 },
            msl::BindTarget { buffer: Some(binding as u8), mutable, ..Default::default() },
        );
    }
    let mut options = msl::Options {
        lang_version: (2, 4),
        fake_missing_bindings: false,
        zero_initialize_workgroup_memory: false,
        ..Default::default()
    };
    // Out-of-range reads give 0 and writes are skipped, as WGSL promises.
    let policy = naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite;
    options.bounds_check_policies = naga::proc::BoundsCheckPolicies { index: policy, buffer: policy, image_load: policy, binding_array: policy };
    options.per_entry_point_map.insert(kernel.name.clone(), resources);
    let (source, translation) = msl::write_string(&module, &info, &options, &msl::PipelineOptions::default())
        .map_err(|e| EmitError::Naga { kernel: kernel.name.clone(), message: format!("MSL writer: {e}") })?;
    // A kernel the writer could not bind is dropped silently, with only this
    // entry saying so: check it (DEPENDENCIES.md, "naga").
    for name in &translation.entry_point_names {
        if let Err(e) = name {
            return Err(EmitError::Naga { kernel: kernel.name.clone(), message: format!("MSL entry point: {e}") });
        }
    }
    Ok(source)
}
