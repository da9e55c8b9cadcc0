//! Fusion rules: each a named rewrite over the e-graph (`egraph.rs`), one
//! line of algebra above it. A rule's left side is an egg pattern over
//! mnemonics (an op with attributes leads with its attribute leaf, `?a`);
//! its right side builds one new op, `?op`, which the rule's guard makes
//! from the match or refuses.
//!
//! Legal for every rule, checked here once: each node the left side
//! matched below its root is read by that node alone (a fused op keeps no
//! intermediate, so one someone else reads must stay) — but for the rules
//! made by `fusion_recomputing`, whose fused op forms that node again
//! itself (a cheap norm), so it may have other readers. No rule changes
//! arithmetic: a fused op is defined as its parts' own functions in their
//! order, so logits are bit-identical with any rule off.

mod attention;
mod mlp;
mod norm;
mod residual;

use crate::egraph::{attr_leaf, attr_of, matched_classes, ClassFacts, Egraph, Facts};
use egg::{Applier, Id, PatternAst, Rewrite, Subst, Symbol, SymbolLang, Var};
use graphc_ir::{Op, TensorType};

type Pattern = egg::Pattern<SymbolLang>;

/// Every rule, in the order they are tried.
pub fn all() -> Vec<Rewrite<SymbolLang, Facts>> {
    mlp::rules().into_iter().chain(attention::rules()).chain(norm::rules()).chain(residual::rules()).collect()
}

/// What a guard sees: the classes the left side's variables matched.
pub struct Match<'a> {
    egraph: &'a Egraph,
    subst: &'a Subst,
}

impl Match<'_> {
    fn class(&self, var: &str) -> Id {
        self.subst[var.parse::<Var>().expect("a rule's variable")]
    }

    /// The op whose attributes `var` (an attribute leaf) names.
    pub fn attrs(&self, var: &str) -> &Op {
        attr_of(self.egraph, self.class(var)).expect("an attribute variable")
    }

    /// What is known of the input node `var` matched.
    pub fn facts(&self, var: &str) -> Option<&ClassFacts> {
        self.egraph[self.class(var)].data.as_ref()
    }

    pub fn ty(&self, var: &str) -> Option<&TensorType> {
        self.facts(var).map(|f| &f.ty)
    }

    pub fn same_shape(&self, a: &str, b: &str) -> bool {
        matches!((self.ty(a), self.ty(b)), (Some(a), Some(b)) if a.shape == b.shape)
    }

    pub fn is_weight(&self, var: &str) -> bool {
        matches!(self.facts(var), Some(ClassFacts { op: Op::Weight { .. }, .. }))
    }
}

/// A named fusion: `lhs` → `rhs`, where `rhs` is one node `?op` over the
/// left side's variables, made by `build` (`None`: not legal here).
pub fn fusion(name: &str, lhs: &str, rhs: &str, build: fn(&Match) -> Option<Op>) -> Rewrite<SymbolLang, Facts> {
    rule(name, lhs, rhs, build, false)
}

/// A `fusion` whose fused op forms what it matched below the root itself,
/// so that node may have other readers (it stays for them).
pub fn fusion_recomputing(name: &str, lhs: &str, rhs: &str, build: fn(&Match) -> Option<Op>) -> Rewrite<SymbolLang, Facts> {
    rule(name, lhs, rhs, build, true)
}

fn rule(name: &str, lhs: &str, rhs: &str, build: fn(&Match) -> Option<Op>, recomputes: bool) -> Rewrite<SymbolLang, Facts> {
    let lhs: Pattern = lhs.parse().unwrap_or_else(|e| panic!("rule {name}: left side: {e}"));
    let rhs: Pattern = rhs.parse().unwrap_or_else(|e| panic!("rule {name}: right side: {e}"));
    let applier = Fuse { lhs: lhs.clone(), rhs, build, recomputes };
    Rewrite::new(name, lhs, applier).unwrap_or_else(|e| panic!("rule {name}: {e}"))
}

struct Fuse {
    lhs: Pattern,
    rhs: Pattern,
    build: fn(&Match) -> Option<Op>,
    recomputes: bool,
}

impl Applier<SymbolLang, Facts> for Fuse {
    fn apply_one(&self, egraph: &mut Egraph, eclass: Id, subst: &Subst, _: Option<&PatternAst<SymbolLang>>, rule: Symbol) -> Vec<Id> {
        let Some(classes) = matched_classes(egraph, &self.lhs, subst) else { return vec![] };
        let (_, below_root) = classes.split_last().expect("a pattern has a root");
        let private = below_root.iter().filter(|(_, is_op)| *is_op).all(|&(c, _)| egraph[c].data.as_ref().is_none_or(|f| f.users <= 1));
        if !private && !self.recomputes {
            return vec![];
        }
        let Some(op) = (self.build)(&Match { egraph, subst }) else { return vec![] };
        let mut subst = subst.clone();
        subst.insert("?op".parse().unwrap(), attr_leaf(egraph, &op));
        self.rhs.apply_one(egraph, eclass, &subst, None, rule)
    }
}
