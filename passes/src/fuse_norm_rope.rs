//! q/k norm + RoPE fusion.
//!
//! Rewrite: `rope(permute{[0, 2, 1, 3]}(norm{rms}(x, w)), positions)` →
//! `norm_rope(x, w, positions)`: the per-head RMS norm of queries and keys
//! (qwen3, qwen3-moe, qwen3-next, gemma3), the move to heads-major layout
//! and the rotation become one pass over each row instead of three passes
//! over the whole tensor (two of them writing a fresh copy).
//!
//! Legal when the norm is RMS without a bias, the permute swaps exactly the
//! sequence and head axes of a 4-D value, and neither the norm's nor the
//! permute's value has another user (neither is materialized for anyone
//! else). No arithmetic changes: every backend's `norm_rope` is the
//! reference's own norm, then rope's rotation with its angles, so logits
//! are bit-identical with the pass on and off.
//!
//! Counts: q and k pairs fused (Gemma 3 270M: 36, two per layer; SmolLM2: 0,
//! it has no q/k norm).

use crate::manager::Pass;
use graphc_ir::op::NormKind;
use graphc_ir::{Graph, Op};

pub struct FuseNormRope;

impl Pass for FuseNormRope {
    fn name(&self) -> &'static str {
        "fuse_norm_rope"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        let ropes: Vec<_> = g.g.node_indices().filter(|&n| matches!(g.node(n).op, Op::Rope { .. })).collect();
        let mut fused = 0;
        for rope in ropes {
            let Op::Rope { style, rotary_dim, theta, scaling } = g.node(rope).op.clone() else { continue };
            let [permute, positions] = g.inputs(rope)[..] else { continue };
            if !matches!(&g.node(permute).op, Op::Permute { perm } if perm[..] == [0, 2, 1, 3]) || g.users(permute) != [rope] {
                continue;
            }
            let norm = g.inputs(permute)[0];
            let Op::Norm { kind: NormKind::Rms, eps } = g.node(norm).op else { continue };
            let [x, w] = g.inputs(norm)[..] else { continue };
            if g.users(norm) != [permute] {
                continue;
            }
            let layer = g.node(rope).layer;
            let fused_node = g.add(Op::NormRope { eps, style, rotary_dim, theta, scaling }, &[x, w, positions], layer);
            g.node_mut(fused_node).ty = g.node(rope).ty.clone();
            g.take_place(fused_node, rope);
            g.replace_uses(rope, fused_node);
            g.remove(rope);
            g.remove(permute);
            g.remove(norm);
            fused += 1;
        }
        fused
    }
}
