//! Stacked expert tensors seen one expert at a time. llama.cpp's converter
//! stacks a MoE layer's experts into `blk.N.ffn_{gate,up,down}_exps`
//! (`[experts, rows, cols]`); each expert's matrix is a contiguous run of
//! whole blocks in it, so a slice is the same mapped bytes, never a copy.
//!
//! A llama GGUF (Mixtral) is lowered from the older per-expert names
//! (`blk.N.ffn_gate.E.weight`, llama.cpp's layout before April 2024, which
//! it still reads): `GgufFile::split_stacked_experts` presents a stacked file
//! that way, so both layouts lower through one set of names.

use crate::error::Diagnostic;
use crate::gguf::{GgufFile, TensorInfo};

/// The experts of stacked tensor `t` (`[experts, rows, cols]`), each
/// `[rows, cols]`, named `t`'s name (the caller renames them).
pub fn expert_slices(path: &str, t: &TensorInfo) -> Result<Vec<TensorInfo>, Diagnostic> {
    let [experts, rows, cols] = t.shape[..] else {
        return Err(Diagnostic::new(path, format!("tensor `{}` has shape {:?}, expected [experts, rows, cols]", t.name, t.shape)));
    };
    if experts == 0 || !t.bytes.is_multiple_of(experts as u64) {
        return Err(Diagnostic::new(path, format!("tensor `{}` of {} bytes does not split into {experts} experts", t.name, t.bytes)));
    }
    let each = t.bytes / experts as u64;
    Ok((0..experts)
        .map(|e| TensorInfo { name: t.name.clone(), shape: vec![rows, cols], dtype: t.dtype, offset: t.offset + e as u64 * each, bytes: each })
        .collect())
}

/// The experts of stacked fused tensor `t` (`[experts, 2·ffn, cols]`, each
/// expert's gate rows then its up rows: Gemma 4's `gate_up_proj`), each as
/// `[gate, up]`, `[ffn, cols]` apiece, named `t`'s name.
pub fn gate_up_halves(path: &str, t: &TensorInfo) -> Result<Vec<[TensorInfo; 2]>, Diagnostic> {
    expert_slices(path, t)?
        .into_iter()
        .map(|slice| {
            let [rows, cols] = slice.shape[..] else { unreachable!("an expert slice is a matrix") };
            if rows % 2 == 1 {
                return Err(Diagnostic::new(path, format!("tensor `{}` has {rows} rows an expert: not a gate and an up half", t.name)));
            }
            let half = slice.bytes / 2;
            Ok([0, 1].map(|i| TensorInfo { shape: vec![rows / 2, cols], offset: slice.offset + i * half, bytes: half, ..slice.clone() }))
        })
        .collect()
}

/// The rows of stacked tensor `t` (`[experts, rows]`: a MoE layer's
/// expert biases), each `[rows]`.
pub fn expert_rows(path: &str, t: &TensorInfo) -> Result<Vec<TensorInfo>, Diagnostic> {
    let [experts, rows] = t.shape[..] else {
        return Err(Diagnostic::new(path, format!("tensor `{}` has shape {:?}, expected [experts, rows]", t.name, t.shape)));
    };
    let as_matrices = TensorInfo { shape: vec![experts, 1, rows], ..t.clone() };
    Ok(expert_slices(path, &as_matrices)?.into_iter().map(|s| TensorInfo { shape: vec![rows], ..s }).collect())
}

impl GgufFile {
    /// Replace each `blk.N.ffn_{gate,up,down}_exps.weight` by its experts,
    /// `blk.N.ffn_{gate,up,down}.E.weight`; `slice_of` keeps the file's
    /// name of each, for diagnostics. A file holding both layouts for one
    /// layer is refused.
    pub fn split_stacked_experts(&mut self) -> Result<(), Diagnostic> {
        let mut out = Vec::with_capacity(self.tensors.len());
        for t in std::mem::take(&mut self.tensors) {
            let stacked = t.name.strip_prefix("blk.").and_then(|r| r.split_once('.')).and_then(|(layer, rest)| {
                let which = rest.strip_suffix("_exps.weight")?;
                ["ffn_gate", "ffn_up", "ffn_down"].contains(&which).then(|| (layer.to_string(), which.to_string()))
            });
            let Some((layer, which)) = stacked else {
                out.push(t);
                continue;
            };
            for (e, mut slice) in expert_slices(&self.path, &t)?.into_iter().enumerate() {
                slice.name = format!("blk.{layer}.{which}.{e}.weight");
                self.slice_of.insert(slice.name.clone(), t.name.clone());
                out.push(slice);
            }
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(t) = out.iter().find(|t| !seen.insert(t.name.as_str())) {
            let stacked = self.slice_of.get(&t.name).cloned().unwrap_or_default();
            return Err(Diagnostic::new(&self.path, format!("tensor `{}` is in the file both on its own and as an expert of `{stacked}`", t.name)));
        }
        self.tensors = out;
        Ok(())
    }
}
