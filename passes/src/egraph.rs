//! The graph as an e-graph (egg), for the rule-based passes.
//!
//! Each node becomes an e-node named by its mnemonic (`mul`, `glu`,
//! `rope`, ...). An op with attributes gets them as its first child: a leaf
//! `#N` naming entry `N` of an attribute table (the whole `Op`), so a
//! pattern matches any `rope` as `(rope ?a ?x ?pos)` and a guard reads
//! `?a`'s attributes. Ops without attributes (`mul`, `silu`, `matmul`) are
//! their mnemonic alone.
//!
//! Every class that holds a node of the input graph carries what rules
//! may ask of it (`ClassFacts`: type, number of users, op). Extraction is
//! ours, not egg's tree-cost extractor: a graph is a DAG, and tree costs
//! double with every shared value (the residual stream), so a class's
//! cost here counts only what it computes alone — a child read by other
//! nodes too costs nothing, it is computed anyway.

use crate::cost::CostModel;
use egg::{Analysis, DidMerge, EGraph, Id, Language, Pattern, Symbol, SymbolLang};
use graphc_ir::{Graph, NodeId, Op, TensorType};
use std::collections::HashMap;

pub type Egraph = EGraph<SymbolLang, Facts>;

/// What a guard may ask of a class holding a node of the input graph.
#[derive(Clone, Debug)]
pub struct ClassFacts {
    pub op: Op,
    pub ty: TensorType,
    /// How many nodes of the input graph read it.
    pub users: usize,
}

/// The attribute table, and the ops without attributes by mnemonic.
#[derive(Default)]
pub struct Facts {
    attrs: Vec<Op>,
    index: HashMap<String, usize>,
    bare: HashMap<Symbol, Op>,
}

impl Analysis<SymbolLang> for Facts {
    /// `Some` for a class that holds a node of the input graph.
    type Data = Option<ClassFacts>;

    fn make(_: &mut Egraph, _: &SymbolLang, _: Id) -> Self::Data {
        None
    }

    fn merge(&mut self, a: &mut Self::Data, b: Self::Data) -> DidMerge {
        match (a.is_some(), b) {
            (false, Some(b)) => {
                *a = Some(b);
                DidMerge(true, false)
            }
            (a_some, b) => DidMerge(false, a_some && b.is_none()),
        }
    }
}

/// Whether `op` is named by its mnemonic alone (no attribute leaf).
fn is_bare(op: &Op) -> bool {
    matches!(op, Op::Gather | Op::Contiguous | Op::Unary(_) | Op::Binary(_) | Op::MatMul | Op::MatMulAdd | Op::Dequantize | Op::GatedDeltaRule)
}

/// Adds `op` over the classes `inputs`.
pub fn add_op(egraph: &mut Egraph, op: &Op, inputs: &[Id]) -> Id {
    let node = enode(egraph, op, inputs);
    egraph.add(node)
}

/// `op` over the classes `inputs` as an e-node: its attribute leaf (added
/// to the e-graph) first when it has attributes.
fn enode(egraph: &mut Egraph, op: &Op, inputs: &[Id]) -> SymbolLang {
    let name = Symbol::from(op.mnemonic());
    let mut children = Vec::with_capacity(inputs.len() + 1);
    if is_bare(op) {
        egraph.analysis.bare.insert(name, op.clone());
    } else {
        children.push(attr_leaf(egraph, op));
    }
    children.extend_from_slice(inputs);
    SymbolLang::new(name, children)
}

/// The class of `op`'s attribute leaf.
pub fn attr_leaf(egraph: &mut Egraph, op: &Op) -> Id {
    let facts = &mut egraph.analysis;
    let key = format!("{op:?}");
    let n = *facts.index.entry(key).or_insert_with(|| {
        facts.attrs.push(op.clone());
        facts.attrs.len() - 1
    });
    egraph.add(SymbolLang::leaf(format!("#{n}")))
}

/// The op an attribute leaf's class names (`None` for any other class).
pub fn attr_of(egraph: &Egraph, class: Id) -> Option<&Op> {
    let node = egraph[class].nodes.first()?;
    let n: usize = node.op.as_str().strip_prefix('#')?.parse().ok()?;
    node.is_leaf().then(|| &egraph.analysis.attrs[n])
}

/// An e-node's op, and the classes of its operands (the attribute leaf left out).
fn op_of<'e>(egraph: &'e Egraph, node: &'e SymbolLang) -> (Op, &'e [Id]) {
    match egraph.analysis.bare.get(&node.op) {
        Some(op) => (op.clone(), &node.children),
        None => (attr_of(egraph, node.children[0]).expect("an op with attributes leads with its leaf").clone(), &node.children[1..]),
    }
}

/// The input graph in an e-graph: each node's class.
pub struct Loaded {
    pub class_of: HashMap<NodeId, Id>,
    /// Each node's e-node as added (its children since canonicalized).
    enode_of: HashMap<NodeId, SymbolLang>,
    order: Vec<NodeId>,
}

/// Loads a verified graph.
pub fn load(graph: &Graph) -> (Egraph, Loaded) {
    let order = graph.topo_order().expect("a verified graph has no cycle");
    let mut egraph = Egraph::new(Facts::default());
    let (mut class_of, mut enode_of) = (HashMap::new(), HashMap::new());
    for &n in &order {
        let inputs: Vec<Id> = graph.inputs(n).iter().map(|i| class_of[i]).collect();
        let enode = enode(&mut egraph, &graph.node(n).op, &inputs);
        let class = egraph.add(enode.clone());
        enode_of.insert(n, enode);
        let users = graph.users(n).len();
        match &mut egraph[class].data {
            // A node hash-consed with an equal one: both read it.
            Some(facts) => facts.users += users,
            data => *data = Some(ClassFacts { op: graph.node(n).op.clone(), ty: graph.ty(n).clone(), users }),
        }
        class_of.insert(n, class);
    }
    (egraph, Loaded { class_of, enode_of, order })
}

/// The classes a pattern's nodes matched, root last, or `None` where one
/// is not in the e-graph.
pub fn matched_classes(egraph: &Egraph, pattern: &Pattern<SymbolLang>, subst: &egg::Subst) -> Option<Vec<(Id, bool)>> {
    let mut ids: Vec<(Id, bool)> = Vec::with_capacity(pattern.ast.len());
    for node in pattern.ast.as_ref() {
        match node {
            egg::ENodeOrVar::Var(v) => ids.push((subst[*v], false)),
            egg::ENodeOrVar::ENode(n) => {
                let n = n.clone().map_children(|c| ids[usize::from(c)].0);
                ids.push((egraph.lookup(n)?, true));
            }
        }
    }
    Some(ids)
}

/// An e-node's own cost: a kernel launch for anything that computes, none
/// for sources, attribute leaves and pure reshapes.
fn own_cost(op: &Op) -> u64 {
    match op {
        Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::Const { .. } | Op::Reshape { .. } => 0,
        Op::Output { .. } | Op::StateOut { .. } => 0,
        _ => 1,
    }
}

/// Fused ops that form an input themselves (`fusion_recomputing`), which
/// other nodes may read too. A shared child costs nothing (above), so
/// under `CostModel::Launches` such an op ties with the nodes it replaces;
/// it wins the tie, since once all readers of the shared value take it,
/// that value's own launch is gone too. `CostModel::Passes` charges the
/// recomputation, so there it wins only where its input had one reader.
fn recomputes(op: &Op) -> bool {
    matches!(op, Op::NormMatMul { .. } | Op::NormMatMulGlu { .. })
}

/// Writes the cheapest form of every class back into `graph`: a class
/// whose cheapest e-node is a node of the input graph keeps it; any other
/// becomes a new node that takes the old one's place and layer, and the
/// nodes only it read are removed. Returns the number of new nodes.
pub fn extract_into(egraph: &Egraph, loaded: &Loaded, graph: &mut Graph, model: CostModel) -> u64 {
    // Which input node each canonical e-node is (the first, where two were one).
    let mut original: HashMap<SymbolLang, NodeId> = HashMap::new();
    for &n in &loaded.order {
        original.entry(loaded.enode_of[&n].clone().map_children(|c| egraph.find(c))).or_insert(n);
    }
    // Costs in the input's topological order: a fused node reads classes
    // of nodes that come before the one it replaces.
    let mut cost: HashMap<Id, u64> = HashMap::new();
    let mut best: HashMap<Id, SymbolLang> = HashMap::new();
    let share = |cost: &HashMap<Id, u64>, c: Id| -> Option<u64> {
        if attr_of(egraph, c).is_some() {
            return Some(0);
        }
        match &egraph[c].data {
            Some(f) if f.users > 1 => Some(0),
            _ => cost.get(&egraph.find(c)).copied(),
        }
    };
    for &n in &loaded.order {
        let class = egraph.find(loaded.class_of[&n]);
        if cost.contains_key(&class) {
            continue;
        }
        let mut choice: Option<(u64, u8, &SymbolLang)> = None;
        for e in &egraph[class].nodes {
            let (op, operands) = op_of(egraph, e);
            let Some(children) = operands.iter().map(|&c| share(&cost, c)).sum::<Option<u64>>() else { continue };
            let recomputed = if recomputes(&op) { model.recompute() } else { 0 };
            let c = own_cost(&op).saturating_add(children).saturating_add(recomputed);
            // Ties keep the input's node, but go to a fused op that forms
            // its own input (`recomputes`).
            let rank = if recomputes(&op) { 2 } else { u8::from(original.contains_key(e)) };
            if choice.is_none_or(|(bc, b_rank, _)| c < bc || (c == bc && rank > b_rank)) {
                choice = Some((c, rank, e));
            }
        }
        let (c, _, e) = choice.expect("a class's input node has known operand costs");
        cost.insert(class, c);
        best.insert(class, e.clone());
    }

    // Each class's first input node: where a new node computing it prints.
    let mut anchor: HashMap<Id, NodeId> = HashMap::new();
    for &n in &loaded.order {
        anchor.entry(egraph.find(loaded.class_of[&n])).or_insert(n);
    }
    let mut build = Build { egraph, original: &original, best: &best, anchor: &anchor, built: HashMap::new(), created: 0 };
    let mut replaced = vec![];
    for &n in &loaded.order {
        let class = egraph.find(loaded.class_of[&n]);
        if original.contains_key(&best[&class]) {
            continue; // kept as it is
        }
        let r = build.realize(graph, class);
        graph.replace_uses(n, r);
        replaced.push(n);
    }
    let created = build.created;
    // Remove the replaced nodes and whatever only they read.
    let mut dead = replaced;
    while let Some(n) = dead.pop() {
        if !graph.contains(n) || !graph.users(n).is_empty() || graph.node(n).op.is_sink() {
            continue;
        }
        let inputs = graph.inputs(n);
        graph.remove(n);
        dead.extend(inputs.into_iter().filter(|&i| !matches!(graph.node(i).op, Op::Input { .. } | Op::Weight { .. } | Op::State { .. })));
    }
    created
}

/// New nodes, each built once.
struct Build<'a> {
    egraph: &'a Egraph,
    original: &'a HashMap<SymbolLang, NodeId>,
    best: &'a HashMap<Id, SymbolLang>,
    anchor: &'a HashMap<Id, NodeId>,
    built: HashMap<Id, NodeId>,
    created: u64,
}

impl Build<'_> {
    /// The graph node computing `class`: an input node where that is the
    /// cheapest form, else a new node placed where the class's first
    /// input node printed.
    fn realize(&mut self, graph: &mut Graph, class: Id) -> NodeId {
        if let Some(&n) = self.built.get(&class) {
            return n;
        }
        let (best, egraph) = (self.best, self.egraph);
        let e = &best[&class];
        let node = match self.original.get(e) {
            Some(&n) => n,
            None => {
                let (op, operands) = op_of(egraph, e);
                let inputs: Vec<NodeId> = operands.iter().map(|&c| self.realize(graph, egraph.find(c))).collect();
                let at = self.anchor[&class];
                let n = graph.add(op, &inputs, graph.node(at).layer);
                graph.take_place(n, at);
                self.created += 1;
                n
            }
        };
        self.built.insert(class, node);
        node
    }
}
