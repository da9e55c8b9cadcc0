//! `moe_experts` on the CPU, for both executors: each expert runs once on
//! the rows routed to it (weight not 0), gathered into one batch, and its
//! weighted output is added into those rows in expert order, as the dense
//! form's sum adds it. The executors differ only in how the routed experts'
//! products are computed (`experts`).

use crate::cpu::reference::binary_fn;
use graphc_ir::BinaryOp;

/// One expert's share of a step: the rows routed to it, and those rows of
/// `x` gathered (`rows.len()` rows of `d`).
pub struct Routed {
    pub expert: usize,
    pub rows: Vec<usize>,
    pub x: Vec<f32>,
}

/// The routed sum over `x`'s rows (`d` wide; `weights` `n_experts` wide a
/// row), skipping the rows `idle` marks. `experts(routed)` gives each
/// routed expert's output (its rows of `d`), in `routed`'s order (by
/// expert). Returns the output and how many (row, expert) products ran.
pub fn routed_sum(
    x: &[f32],
    d: usize,
    weights: &[f32],
    n_experts: usize,
    idle: impl Fn(usize) -> bool,
    experts: impl FnOnce(&[Routed]) -> Result<Vec<Vec<f32>>, String>,
) -> Result<(Vec<f32>, usize), String> {
    let rows = x.len() / d.max(1);
    let routed: Vec<Routed> = (0..n_experts)
        .filter_map(|e| {
            let rows: Vec<usize> = (0..rows).filter(|&r| !idle(r) && weights[r * n_experts + e] != 0.0).collect();
            let x = rows.iter().flat_map(|&r| &x[r * d..(r + 1) * d]).copied().collect();
            (!rows.is_empty()).then_some(Routed { expert: e, rows, x })
        })
        .collect();
    let outputs = experts(&routed)?;
    let (mul, add) = (binary_fn(BinaryOp::Mul), binary_fn(BinaryOp::Add));
    let mut out = vec![0f32; rows * d];
    let mut started = vec![false; rows];
    for (r, y) in routed.iter().zip(&outputs) {
        for (i, &row) in r.rows.iter().enumerate() {
            let w = weights[row * n_experts + r.expert];
            let (o, y) = (&mut out[row * d..(row + 1) * d], &y[i * d..(i + 1) * d]);
            if started[row] {
                o.iter_mut().zip(y).for_each(|(o, &v)| *o = add(*o, mul(v, w)));
            } else {
                o.iter_mut().zip(y).for_each(|(o, &v)| *o = mul(v, w));
                started[row] = true;
            }
        }
    }
    Ok((out, routed.iter().map(|r| r.rows.len()).sum()))
}
