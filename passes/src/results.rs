//! An op of several results put where the nodes it replaces stood: what
//! the structural passes that make one (`attention_head`,
//! `norm_rope_attention`) share. The new op takes the place (and the
//! readers) of the node its result 0 stands for; a `result{index}` node
//! takes those of each node a further result stands for; then the
//! replaced nodes go.

use graphc_ir::{Graph, NodeId, Op};

/// Add `op` of `operands` in `main`'s place, `result{index = i + 1}` in
/// `further[i]`'s, each typed as the node it stands for (so a later match
/// in the same run can read it), and remove `replaced` (which holds
/// `main` and `further`). Returns the new op.
pub fn put_in_place(g: &mut Graph, op: Op, operands: &[NodeId], main: NodeId, further: &[NodeId], replaced: &[NodeId]) -> NodeId {
    let layer = g.node(main).layer;
    let fused = g.add(op, operands, layer);
    g.node_mut(fused).ty = g.node(main).ty.clone();
    g.take_place(fused, main);
    g.replace_uses(main, fused);
    for (i, &node) in further.iter().enumerate() {
        let result = g.add(Op::Result { index: i + 1 }, &[fused], layer);
        g.node_mut(result).ty = g.node(node).ty.clone();
        g.take_place(result, node);
        g.replace_uses(node, result);
    }
    for &n in replaced {
        g.remove(n);
    }
    fused
}
