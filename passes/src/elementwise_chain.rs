//! Elementwise chains: a unary or binary op whose value has one reader,
//! itself unary or binary and of the same shape, is folded into that
//! reader (recursively), and the chain becomes one `chain` op, which a GPU
//! runs as one kernel: `c * tanh(x / c)` is one launch, and its
//! intermediates never reach memory.
//!
//! Rewrite:
//! ```text
//! %a = div %x, %c
//! %b = tanh %a
//! %y = mul %b, %c
//! ```
//! becomes
//! ```text
//! %y = chain{expr="mul(tanh(div(in0, in1)), in1)"} %x, %c
//! ```
//!
//! A structural pass, not an e-graph rule: a chain has any number of ops
//! and operands, and a pattern is of one fixed shape.
//!
//! Legal when: every folded op is f32, has its reader as its only reader,
//! and has that reader's shape (a value its reader broadcasts would be
//! recomputed for each element it stretches to). Operands may broadcast,
//! as `binary`'s do. The op computes each step with that op's own
//! arithmetic (no contraction of a product into an add), so logits keep
//! their bits.
//!
//! GPU plans only: on the CPU the op is its parts
//! (`backends/src/cpu/parts.rs`) and saves nothing.
//!
//! Counts: ops folded into another's chain (SmolLM2, Gemma 3, Qwen2.5: 0;
//! the qwen3_next fixture: 55, its gates and sums; gemma2: its final
//! logit soft-cap's division and tanh).

use crate::cost::CostModel;
use crate::pass::Pass;
use graphc_ir::{ChainExpr, DType, Graph, NodeId, Op};
use std::collections::HashSet;

pub struct ElementwiseChain {
    /// Chains form in a plan counted in launches (a GPU's).
    pub cost: CostModel,
}

/// The chain rooted at `id`: its expression, the operands it reads (in
/// first-read order, each once) and the folded nodes it replaces.
fn build(g: &Graph, id: NodeId, folded: &HashSet<NodeId>, leaves: &mut Vec<NodeId>, replaced: &mut Vec<NodeId>) -> ChainExpr {
    let operand = |input: NodeId, leaves: &mut Vec<NodeId>, replaced: &mut Vec<NodeId>| {
        if folded.contains(&input) {
            replaced.push(input);
            build(g, input, folded, leaves, replaced)
        } else {
            let i = leaves.iter().position(|&l| l == input).unwrap_or_else(|| {
                leaves.push(input);
                leaves.len() - 1
            });
            ChainExpr::Input(i)
        }
    };
    let inputs = g.inputs(id);
    match g.node(id).op {
        Op::Unary(u) => ChainExpr::Unary(u, Box::new(operand(inputs[0], leaves, replaced))),
        Op::Binary(b) => {
            let x = operand(inputs[0], leaves, replaced);
            ChainExpr::Binary(b, Box::new(x), Box::new(operand(inputs[1], leaves, replaced)))
        }
        _ => unreachable!("chains hold unary and binary ops"),
    }
}

impl Pass for ElementwiseChain {
    fn name(&self) -> &'static str {
        "elementwise_chain"
    }

    fn run(&self, g: &mut Graph) -> u64 {
        if self.cost != CostModel::Launches {
            return 0;
        }
        let Ok(order) = g.topo_order() else { return 0 };
        let elementwise = |g: &Graph, id: NodeId| matches!(g.node(id).op, Op::Unary(_) | Op::Binary(_)) && g.ty(id).dtype == DType::F32;
        // The ops folded into their one reader's kernel.
        let folded: HashSet<NodeId> = order
            .iter()
            .copied()
            .filter(|&id| {
                let users = g.users(id);
                elementwise(g, id) && users.len() == 1 && elementwise(g, users[0]) && g.ty(id).shape == g.ty(users[0]).shape
            })
            .collect();
        let roots: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|&id| elementwise(g, id) && !folded.contains(&id) && g.inputs(id).iter().any(|i| folded.contains(i)))
            .collect();
        let mut count = 0;
        // Removed once every chain is formed: a removed node's id may be
        // given to a new node, which `folded` must not mistake for it.
        let mut removed = vec![];
        for root in roots {
            let (mut leaves, mut replaced) = (vec![], vec![]);
            let expr = build(g, root, &folded, &mut leaves, &mut replaced);
            count += replaced.len() as u64;
            let chain = g.add(Op::Chain { expr }, &leaves, g.node(root).layer);
            g.node_mut(chain).ty = g.node(root).ty.clone();
            g.take_place(chain, root);
            g.replace_uses(root, chain);
            removed.push(root);
            removed.extend(replaced);
        }
        for n in removed {
            g.remove(n);
        }
        count
    }
}
