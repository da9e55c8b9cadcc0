//! The verifier: infers every node's dtype and shape from its inputs and
//! rejects a graph that does not type-check, naming the node (`%N`, its
//! position in the printed form), its op and the mismatch.

use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::shape::TensorType;
use crate::signature::{infer, results};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("error: node {node} ({op}): {message}")]
pub struct VerifyError {
    /// `%N` as printed.
    pub node: String,
    pub op: String,
    pub message: String,
}

/// Infer and store every node's type; the first error stops verification.
pub fn verify(graph: &mut Graph) -> Result<(), VerifyError> {
    let order = graph.topo_order().map_err(|n| VerifyError {
        node: format!("#{}", n.index()),
        op: graph.node(n).op.mnemonic(),
        message: "the graph has a cycle through this node".into(),
    })?;
    let names: HashMap<NodeId, String> = order.iter().enumerate().map(|(i, &n)| (n, format!("%{i}"))).collect();
    let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut state_in: HashMap<String, TensorType> = HashMap::new();
    let mut state_node: HashMap<String, NodeId> = HashMap::new();
    let mut state_out: HashSet<String> = HashSet::new();
    let mut source_names: HashSet<(u8, String)> = HashSet::new();
    for &id in &order {
        let node = graph.node(id);
        let err = |message: String| VerifyError { node: names[&id].clone(), op: node.op.mnemonic(), message };
        let inputs = graph.inputs(id);
        if let Some(sink) = inputs.iter().find(|&&i| graph.node(i).op.is_sink()) {
            return Err(err(format!("operand {} is a `{}`, which has no value to read", names[sink], graph.node(*sink).op.mnemonic())));
        }
        let in_tys: Vec<TensorType> = inputs.iter().map(|i| graph.node(*i).ty.clone().unwrap()).collect();
        if let Some(declared) = node.op.declared_type() {
            crate::shape::check_range(&declared.shape).map_err(&err)?;
        }
        let inferred = match node.op {
            // The producer's result `index`, from the producer's operands.
            Op::Result { index } => {
                let [producer] = inputs[..] else { return Err(err(format!("takes 1 input(s), found {}", inputs.len()))) };
                if let Some(twin) = graph.users(producer).into_iter().find(|&u| position[&u] < position[&id] && graph.node(u).op == node.op) {
                    return Err(err(format!(
                        "result {index} of {} is read by {} already: one `result` node a result",
                        names[&producer], names[&twin]
                    )));
                }
                let operand_tys: Vec<TensorType> = graph.inputs(producer).iter().map(|i| graph.node(*i).ty.clone().unwrap()).collect();
                let mut results = results(&graph.node(producer).op, &operand_tys).map_err(&err)?;
                if index == 0 || index >= results.len() {
                    let n = results.len();
                    return Err(err(format!(
                        "{} (operand {}) has {n} result(s): index {index} is not one of its further results, 1..={}",
                        graph.node(producer).op.mnemonic(),
                        names[&producer],
                        n - 1
                    )));
                }
                results.swap_remove(index)
            }
            _ => infer(&node.op, &in_tys).map_err(&err)?,
        };
        crate::shape::check_range(&inferred.shape).map_err(&err)?;
        if let Op::Weight { name, ty } = &node.op {
            let row = ty.shape.last().and_then(|d| d.as_const()).unwrap_or(0);
            let block = ty.dtype.block_elems() as i64;
            if ty.dtype.is_quantized() && row % block != 0 {
                return Err(err(format!("weight `{name}` is {} with rows of {row}, not a whole number of {block}-element blocks", ty.dtype)));
            }
        }
        match &node.op {
            Op::Input { name, .. } | Op::Weight { name, .. } | Op::State { name, .. } => {
                let kind = match node.op {
                    Op::Input { .. } => 0,
                    Op::Weight { .. } => 1,
                    _ => 2,
                };
                if !source_names.insert((kind, name.clone())) {
                    return Err(err(format!("`{name}` is declared twice")));
                }
                if let Op::State { name, ty } = &node.op {
                    state_in.insert(name.clone(), ty.clone());
                    state_node.insert(name.clone(), id);
                }
                if !matches!(node.op, Op::Weight { .. }) && inferred.dtype.is_quantized() {
                    return Err(err(format!("only weights may have a quantized type, found {}", inferred.dtype)));
                }
            }
            Op::StateOut { name } => {
                let Some(decl) = state_in.get(name) else {
                    return Err(err(format!("state_out `{name}` has no matching state input")));
                };
                if decl.dtype != inferred.dtype || decl.shape.len() != inferred.shape.len() {
                    return Err(err(format!("state `{name}` is {decl} but its next value is {inferred}")));
                }
                if !state_out.insert(name.clone()) {
                    return Err(err(format!("state `{name}` is written twice")));
                }
            }
            _ => {}
        }
        if let Some(declared) = &node.ty {
            if *declared != inferred && node.op.declared_type().is_none() {
                return Err(err(format!("declared type {declared} but inputs give {inferred}")));
            }
        }
        graph.node_mut(id).ty = Some(inferred);
    }
    let mut unwritten: Vec<&String> = state_in.keys().filter(|n| !state_out.contains(*n)).collect();
    unwritten.sort();
    if let Some(missing) = unwritten.first() {
        return Err(VerifyError {
            node: names[&state_node[*missing]].clone(),
            op: "state".into(),
            message: format!("state `{missing}` is read but never written (no state_out)"),
        });
    }
    Ok(())
}
