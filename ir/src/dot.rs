//! The graph as Graphviz `dot`, for people who would rather look than read:
//! one box per node labelled with its text-form line (`%N = op{attrs} :
//! type`), one arrow per operand (labelled with its position when a node
//! has several), each layer a cluster. Weights, inputs and states are drawn
//! as ellipses, sinks as double octagons, rewritten in-place ops (`kv_append`)
//! filled, so a before/after pair shows each rewrite at a glance.
//!
//! `graphc dump --format dot --layers 0..1` draws layer 0 and the nodes
//! outside any layer; operands from elided layers appear as plain points.

use crate::graph::{Graph, NodeId};
use crate::op::Op;
use crate::text::node_line;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// `dot` source for the nodes of layers `keep_layer` accepts (and of no layer).
pub fn to_dot(graph: &Graph, keep_layer: impl Fn(u32) -> bool) -> String {
    let order = graph.topo_order().expect("cannot draw a graph with a cycle");
    let names: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let shown = |id: NodeId| graph.node(id).layer.is_none_or(&keep_layer);
    let mut out = format!("digraph {:?} {{\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n", graph.name);
    let mut clusters: BTreeMap<Option<u32>, Vec<NodeId>> = BTreeMap::new();
    for &id in &order {
        if shown(id) {
            clusters.entry(graph.node(id).layer).or_default().push(id);
        }
    }
    for (layer, ids) in &clusters {
        let indent = if layer.is_some() { "    " } else { "  " };
        if let Some(l) = layer {
            let _ = writeln!(out, "  subgraph cluster_layer{l} {{\n    label=\"layer {l}\";\n    style=rounded;");
        }
        for &id in ids {
            let op = &graph.node(id).op;
            let style = match op {
                Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::Const { .. } => ", shape=ellipse",
                Op::StateOut { .. } | Op::Output { .. } => ", shape=doubleoctagon",
                Op::KvAppend { .. } => ", style=filled, fillcolor=\"#d8ecd8\"",
                _ => "",
            };
            let label = node_line(graph, id, &names).replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(out, "{indent}n{} [label=\"{label}\"{style}];", names[&id]);
        }
        if layer.is_some() {
            out.push_str("  }\n");
        }
    }
    let mut elided = Vec::new();
    for &id in &order {
        if !shown(id) {
            continue;
        }
        let inputs = graph.inputs(id);
        for (slot, inp) in inputs.iter().enumerate() {
            if !shown(*inp) && !elided.contains(inp) {
                elided.push(*inp);
                let _ = writeln!(out, "  n{} [shape=point, xlabel=\"%{}\"];", names[inp], names[inp]);
            }
            let label = if inputs.len() > 1 { format!(" [label=\"{slot}\", fontsize=8]") } else { String::new() };
            let _ = writeln!(out, "  n{} -> n{}{label};", names[inp], names[&id]);
        }
    }
    out.push_str("}\n");
    out
}
