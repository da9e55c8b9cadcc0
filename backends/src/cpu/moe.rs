//! `moe_experts` on the CPU, for both executors: each expert runs once on
//! the rows routed to it (weight not 0), gathered into one batch, and its
//! weighted output is added into those rows in expert order, as the dense
//! form's sum adds it. The executors differ only in how an expert's
//! products are computed (`expert`).

/// The routed sum over `x`'s rows (`d` wide; `weights` `n_experts` wide a
/// row), skipping the rows `idle` marks. `expert(e, rows, m)` gives expert
/// `e`'s output (`m` rows of `d`) on the `m` gathered rows. Returns the
/// output and how many (row, expert) products ran.
pub fn routed_sum(
    x: &[f32],
    d: usize,
    weights: &[f32],
    n_experts: usize,
    idle: impl Fn(usize) -> bool,
    mut expert: impl FnMut(usize, &[f32], usize) -> Result<Vec<f32>, String>,
) -> Result<(Vec<f32>, usize), String> {
    let rows = x.len() / d.max(1);
    let mut out = vec![0f32; rows * d];
    let mut started = vec![false; rows];
    let mut products = 0;
    let mut gathered = Vec::new();
    for e in 0..n_experts {
        let routed: Vec<usize> = (0..rows).filter(|&r| !idle(r) && weights[r * n_experts + e] != 0.0).collect();
        if routed.is_empty() {
            continue;
        }
        gathered.clear();
        for &r in &routed {
            gathered.extend_from_slice(&x[r * d..(r + 1) * d]);
        }
        let y = expert(e, &gathered, routed.len())?;
        products += routed.len();
        for (i, &r) in routed.iter().enumerate() {
            let w = weights[r * n_experts + e];
            let (row, y) = (&mut out[r * d..(r + 1) * d], &y[i * d..(i + 1) * d]);
            // The `mul` and `add` arms' arithmetic: one f32 product, one f32 sum.
            if started[r] {
                row.iter_mut().zip(y).for_each(|(o, &v)| *o += v * w);
            } else {
                row.iter_mut().zip(y).for_each(|(o, &v)| *o = v * w);
                started[r] = true;
            }
        }
    }
    Ok((out, products))
}
