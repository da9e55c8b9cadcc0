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

/// The Metal buffer slot of the sizes buffer: the byte size of every bound
/// buffer holding a runtime-sized array, which naga's bounds checks read.
pub const SIZES_SLOT: u8 = 30;

/// A kernel as the Metal host runs it: the source, and what the host must
/// bind besides the kernel's buffers (slot `i`) and parameters (the slot
/// after them). Both lists follow the module's global variables in order,
/// as naga's writer and wgpu-hal's Metal backend (what runs naga's MSL on
/// Metal every day) do.
#[derive(Clone, Debug)]
pub struct MslKernel {
    pub source: String,
    /// The entry point after naga's renaming (`main` would be `main_`).
    pub entry_point: String,
    /// Threadgroup memory per workgroup array the kernel uses, in bytes
    /// (multiples of 16, as Metal requires), in threadgroup-index order.
    pub threadgroup_bytes: Vec<u32>,
    /// The bindings (= buffer slots) whose byte sizes the sizes buffer
    /// holds, in its member order.
    pub sized_bindings: Vec<u32>,
}

/// The kernel's MSL (see [`translate`]).
pub fn emit(kernel: &Kernel) -> Result<String, EmitError> {
    Ok(translate(kernel)?.source)
}

/// Buffer `i` of the kernel is Metal buffer slot `i`, the parameters the slot
/// after them; runtime-sized arrays take their lengths from [`SIZES_SLOT`].
pub fn translate(kernel: &Kernel) -> Result<MslKernel, EmitError> {
    let wgsl = super::wgsl::emit(kernel);
    let (module, info) = validate(kernel, &wgsl)?;
    let mut resources = msl::EntryPointResources { sizes_buffer: Some(SIZES_SLOT), ..Default::default() };
    let n_bindings = kernel.buffers.len() + usize::from(!kernel.params.is_empty());
    for binding in 0..n_bindings {
        let mutable = kernel.buffers.get(binding).is_some_and(|b| b.writable);
        resources.resources.insert(
            naga::ResourceBinding { group: 0, binding: binding as u32 },
            msl::BindTarget { buffer: Some(binding as u8), mutable, ..Default::default() },
        );
    }
    let mut options =
        msl::Options { lang_version: (2, 4), fake_missing_bindings: false, zero_initialize_workgroup_memory: false, ..Default::default() };
    // Out-of-range reads give 0 and writes are skipped, as WGSL promises.
    let policy = naga::proc::BoundsCheckPolicy::ReadZeroSkipWrite;
    options.bounds_check_policies = naga::proc::BoundsCheckPolicies { index: policy, buffer: policy, image_load: policy, binding_array: policy };
    options.per_entry_point_map.insert(kernel.name.clone(), resources);
    let (source, translation) = msl::write_string(&module, &info, &options, &msl::PipelineOptions::default())
        .map_err(|e| EmitError::Naga { kernel: kernel.name.clone(), message: format!("MSL writer: {e}") })?;
    // A kernel the writer could not bind is dropped silently, with only this
    // entry saying so: check it (DEPENDENCIES.md, "naga").
    let entry_point = match translation.entry_point_names.as_slice() {
        [Ok(name)] => name.clone(),
        [Err(e)] => return Err(EmitError::Naga { kernel: kernel.name.clone(), message: format!("MSL entry point: {e}") }),
        other => return Err(EmitError::Naga { kernel: kernel.name.clone(), message: format!("{} entry points, expected one", other.len()) }),
    };
    let used = info.get_entry_point(0);
    let mut threadgroup_bytes = vec![];
    let mut sized_bindings = vec![];
    for (handle, var) in module.global_variables.iter() {
        match var.space {
            naga::AddressSpace::WorkGroup if !used[handle].is_empty() => {
                threadgroup_bytes.push(module.types[var.ty].inner.size(module.to_ctx()).next_multiple_of(16));
            }
            naga::AddressSpace::Uniform | naga::AddressSpace::Storage { .. } => {
                if let Some(binding) = &var.binding {
                    if module.types[var.ty].inner.needs_host_buffer_byte_size(&module.types) {
                        sized_bindings.push(binding.binding);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(MslKernel { source, entry_point, threadgroup_bytes, sized_bindings })
}
