//! Plain-Rust kernels: any CPU, and the cross-check for the intrinsics.

use crate::cpu::kernels::dot;
use graphc_ir::DType;

/// Dequantize one block (or 256 plain elements) at a time into a stack buffer
/// and dot it with `x`. The block decoders are the format definitions in
/// `graphc_ir::quant`.
pub fn dot_row(dtype: DType, row: &[u8], x: &[f32], _xsums: &[f32]) -> f32 {
    let be = dtype.block_elems();
    let chunk = if be == 1 { 256 } else { be };
    let mut buf = [0f32; 256];
    let mut acc = 0f32;
    for (xc, i) in x.chunks(chunk).zip((0..).step_by(chunk)) {
        let bytes = dtype.storage_bytes(i as u64).unwrap() as usize;
        let len = dtype.storage_bytes(xc.len() as u64).unwrap() as usize;
        graphc_ir::quant::dequantize(dtype, &row[bytes..bytes + len], &mut buf[..xc.len()]);
        acc += dot(&buf[..xc.len()], xc);
    }
    acc
}

pub fn tile_2x4(x: &[f32], ldx: usize, w: &[f32], ldw: usize, k: usize, out: &mut super::Tile) {
    for (i, o) in out.iter_mut().take(2).enumerate() {
        for (j, v) in o.iter_mut().enumerate() {
            *v = dot(&x[i * ldx..i * ldx + k], &w[j * ldw..j * ldw + k]);
        }
    }
}
