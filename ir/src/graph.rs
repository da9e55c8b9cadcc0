//! The graph: SSA values on a petgraph `StableDiGraph`. An edge runs from an
//! operand to its user and carries the operand's position, so a node's inputs
//! are its incoming edges sorted by that position. Removing nodes keeps the
//! other ids stable, which rewrites rely on.

use crate::op::Op;
use crate::shape::TensorType;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub type NodeId = NodeIndex<u32>;

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    /// Inferred by the verifier (declared for sources).
    pub ty: Option<TensorType>,
    /// The decoder layer this node belongs to, if any (for dumps and summaries).
    pub layer: Option<u32>,
    /// Where the node prints among its peers: a rewrite that replaces a node
    /// gives its replacement the old node's place, so the text form of an
    /// optimized graph still reads in model order. `None` = its own id.
    pub place: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub(crate) g: StableDiGraph<Node, u32, u32>,
}

impl Graph {
    pub fn new(name: &str) -> Graph {
        Graph { name: name.to_string(), g: StableDiGraph::default() }
    }

    pub fn add(&mut self, op: Op, inputs: &[NodeId], layer: Option<u32>) -> NodeId {
        let ty = op.declared_type().cloned();
        let id = self.g.add_node(Node { op, ty, layer, place: None });
        for (pos, &src) in inputs.iter().enumerate() {
            self.g.add_edge(src, id, pos as u32);
        }
        id
    }

    /// Every node's id, in id order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.g.node_indices()
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> + '_ {
        self.g.node_weights()
    }

    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node> + '_ {
        self.g.node_weights_mut()
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.g.contains_node(id)
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id]
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.g[id]
    }

    pub fn inputs(&self, id: NodeId) -> Vec<NodeId> {
        let mut e: Vec<(u32, NodeId)> = self.g.edges_directed(id, Direction::Incoming).map(|e| (*e.weight(), e.source())).collect();
        e.sort();
        e.into_iter().map(|(_, s)| s).collect()
    }

    /// Nodes that use `id` (each once, in id order).
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let mut u: Vec<NodeId> = self.g.neighbors_directed(id, Direction::Outgoing).collect();
        u.sort();
        u.dedup();
        u
    }

    /// Point every use of `old` at `new`.
    pub fn replace_uses(&mut self, old: NodeId, new: NodeId) {
        let edges: Vec<_> = self.g.edges_directed(old, Direction::Outgoing).map(|e| (e.id(), e.target(), *e.weight())).collect();
        for (e, target, pos) in edges {
            self.g.remove_edge(e);
            self.g.add_edge(new, target, pos);
        }
    }

    /// Print `new` where `old` printed.
    pub fn take_place(&mut self, new: NodeId, old: NodeId) {
        let key = self.place_key(old);
        self.g[new].place = Some(key);
    }

    fn place_key(&self, id: NodeId) -> u32 {
        self.g[id].place.unwrap_or(id.index() as u32)
    }

    pub fn remove(&mut self, id: NodeId) {
        self.g.remove_node(id);
    }

    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// A topological order that keeps insertion order wherever it can (Kahn's
    /// algorithm taking the ready node with the smallest place), so printing
    /// is stable.
    /// `Err(id)` names a node on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, NodeId> {
        let mut indeg: std::collections::HashMap<NodeId, usize> =
            self.g.node_indices().map(|n| (n, self.g.edges_directed(n, Direction::Incoming).count())).collect();
        let mut ready: BinaryHeap<Reverse<(u32, NodeId)>> =
            indeg.iter().filter(|(_, &d)| d == 0).map(|(&n, _)| Reverse((self.place_key(n), n))).collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(Reverse((_, n))) = ready.pop() {
            order.push(n);
            for e in self.g.edges_directed(n, Direction::Outgoing) {
                let d = indeg.get_mut(&e.target()).unwrap();
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse((self.place_key(e.target()), e.target())));
                }
            }
        }
        if order.len() != self.len() {
            let stuck = self.g.node_indices().find(|n| indeg[n] > 0).unwrap();
            return Err(stuck);
        }
        Ok(order)
    }

    pub fn find_input(&self, name: &str) -> Option<NodeId> {
        self.g.node_indices().find(|&n| matches!(&self.g[n].op, Op::Input { name: m, .. } if m == name))
    }

    pub fn ty(&self, id: NodeId) -> &TensorType {
        self.g[id].ty.as_ref().expect("graph not verified: node has no type")
    }
}
