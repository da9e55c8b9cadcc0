//! Two independent kernel calls as one launch: a decode step's rotation of
//! q and of k, or its appends to the K and the V cache, are tiny kernels
//! whose launch costs more than their work.
//!
//! The rewrite, on the kernel IR: the stacked kernel's grid is the first
//! call's groups followed by the second's; a workgroup below `groups_0`
//! runs the first body, the others the second with its group index less
//! `groups_0`. Each part keeps its own buffers and parameters (renamed
//! `_0`/`_1`), so every value is computed by the same expressions as in
//! the part's own kernel (bit for bit). Branching on the group index keeps
//! barriers in uniform control flow. Workgroup arrays of one name, type and
//! length are shared (the parts never run in one workgroup); others are
//! renamed.
//!
//! Legal for any two calls of kernels written over `group_index()` (all of
//! them: `kir`'s only grid coordinate) with one workgroup size, where
//! neither reads what the other writes (the graph executor pairs only
//! such nodes).

use crate::call::{Arg, KernelCall, Value};
use crate::kir::{group_index, param, Expr, Kernel, Shared, Stmt, Ty, ROUNDING_ONE};

/// The name of the stacked kernel of `a` and `b`.
fn stacked_name(a: &str, b: &str) -> String {
    if a == b {
        format!("{a}_pair")
    } else {
        format!("{a}_with_{b}")
    }
}

/// `a` then `b` as one kernel; parameters `a`'s, `b`'s, then `groups_0`,
/// then `kir::ROUNDING_ONE` where a part has it: that one is shared, not
/// renamed (the emitters read it by its name).
pub fn stack_kernels(a: &Kernel, b: &Kernel) -> Kernel {
    assert_eq!(a.workgroup_size, b.workgroup_size, "stacked kernels share a workgroup size");
    let mut out = Kernel::new(&stacked_name(&a.name, &b.name), a.workgroup_size);
    let mut shared: Vec<Shared> = a.shared.clone();
    let mut parts = vec![];
    for (part, k) in [a, b].into_iter().enumerate() {
        let suffix = format!("_{part}");
        let mut renames = Renames { suffix: suffix.clone(), shared: vec![], shift_groups: part == 1 };
        for s in &k.shared {
            if part == 1 && !a.shared.contains(s) {
                let renamed = format!("{}{suffix}", s.name);
                renames.shared.push(s.name.clone());
                shared.push(Shared { name: renamed, ..s.clone() });
            }
        }
        for buffer in &k.buffers {
            out.buffers.push(crate::kir::Buffer { name: format!("{}{suffix}", buffer.name), ..buffer.clone() });
        }
        for (p, ty) in k.params.iter().filter(|(p, _)| p != ROUNDING_ONE) {
            out.params.push((format!("{p}{suffix}"), *ty));
        }
        parts.push(k.body.iter().map(|s| renames.stmt(s)).collect::<Vec<_>>());
    }
    out.params.push(("groups_0".into(), Ty::U32));
    if rounded(a) || rounded(b) {
        out = out.rounded_ops();
    }
    out.shared = shared;
    let second = parts.pop().expect("two parts");
    let first = parts.pop().expect("two parts");
    out.body = vec![crate::kir::if_else(group_index().lt(param("groups_0")), first, second)];
    out
}

fn rounded(k: &Kernel) -> bool {
    k.params.iter().any(|(p, _)| p == ROUNDING_ONE)
}

/// What one part's body becomes inside the stacked kernel.
struct Renames {
    suffix: String,
    /// Workgroup arrays of this part that are renamed (not shared).
    shared: Vec<String>,
    /// The second part counts its groups from `groups_0`.
    shift_groups: bool,
}

impl Renames {
    fn array(&self, name: &str) -> String {
        if self.shared.iter().any(|s| s == name) {
            format!("{name}{}", self.suffix)
        } else {
            name.to_string()
        }
    }

    fn expr(&self, e: &Expr) -> Expr {
        if self.shift_groups && *e == group_index() {
            return group_index() - param("groups_0");
        }
        let b = |x: &Expr| Box::new(self.expr(x));
        match e {
            Expr::Param(p) if p == ROUNDING_ONE => e.clone(),
            Expr::Param(p) => Expr::Param(format!("{p}{}", self.suffix)),
            Expr::Load(buffer, index) => Expr::Load(format!("{buffer}{}", self.suffix), b(index)),
            Expr::LoadShared(array, index) => Expr::LoadShared(self.array(array), b(index)),
            Expr::Bin(op, x, y) => Expr::Bin(*op, b(x), b(y)),
            Expr::Neg(x) => Expr::Neg(b(x)),
            Expr::Not(x) => Expr::Not(b(x)),
            Expr::Call(func, args) => Expr::Call(*func, args.iter().map(|x| self.expr(x)).collect()),
            Expr::Cast(ty, x) => Expr::Cast(*ty, b(x)),
            Expr::Select(c, x, y) => Expr::Select(b(c), b(x), b(y)),
            Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) | Expr::Var(_) | Expr::Builtin(..) => e.clone(),
        }
    }

    fn stmt(&self, s: &Stmt) -> Stmt {
        let block = |body: &[Stmt]| body.iter().map(|s| self.stmt(s)).collect();
        match s {
            Stmt::Let { name, ty, value } => Stmt::Let { name: name.clone(), ty: *ty, value: self.expr(value) },
            Stmt::Assign { name, value } => Stmt::Assign { name: name.clone(), value: self.expr(value) },
            Stmt::Store { buffer, index, value } => {
                Stmt::Store { buffer: format!("{buffer}{}", self.suffix), index: self.expr(index), value: self.expr(value) }
            }
            Stmt::StoreShared { array, index, value } => {
                Stmt::StoreShared { array: self.array(array), index: self.expr(index), value: self.expr(value) }
            }
            Stmt::For { var, ty, start, end, step, body } => {
                Stmt::For { var: var.clone(), ty: *ty, start: self.expr(start), end: self.expr(end), step: self.expr(step), body: block(body) }
            }
            Stmt::Halving { var, start, body } => Stmt::Halving { var: var.clone(), start: self.expr(start), body: block(body) },
            Stmt::If { cond, then, otherwise } => Stmt::If { cond: self.expr(cond), then: block(then), otherwise: block(otherwise) },
            Stmt::Barrier => Stmt::Barrier,
        }
    }
}

/// Two single-launch calls as one: `a`'s arguments, then `b`'s as
/// `after` gives them. `a_inputs` is how many operands `a`'s op takes.
pub fn stack_calls(a: &KernelCall, b: &KernelCall, a_inputs: usize) -> KernelCall {
    let b = after(b, a_inputs);
    let mut args = a.args.clone();
    args.extend(b.args.iter().cloned());
    // Each part's parameters but the shared rounding one, which goes last.
    let own = |call: &KernelCall| -> Vec<Value> {
        call.kernel.params.iter().zip(&call.params).filter(|((p, _), _)| p != ROUNDING_ONE).map(|(_, v)| *v).collect()
    };
    let mut params = own(a);
    params.extend(own(&b));
    params.push(Value::U32(a.groups));
    if let Some(one) = [a, &b].iter().find_map(|c| c.kernel.params.iter().zip(&c.params).find(|((p, _), _)| p == ROUNDING_ONE).map(|(_, v)| *v)) {
        params.push(one);
    }
    KernelCall { kernel: stack_kernels(&a.kernel, &b.kernel), args, params, groups: a.groups + b.groups, out_shape: a.out_shape.clone() }
}

/// Call `b` as the second of a pair whose operands follow `a_inputs` of
/// the first's: its inputs renumbered, its result made a further one (a
/// fresh result becomes `ExtraOutput`, an in-place one `ExtraInPlace`).
/// The pair's two calls, where one kernel may not bind all their buffers.
pub fn after(b: &KernelCall, a_inputs: usize) -> KernelCall {
    let shift = |arg: &Arg| match arg {
        Arg::Input(i) => Arg::Input(i + a_inputs),
        Arg::InputRange { input, offset, bytes } => Arg::InputRange { input: input + a_inputs, offset: *offset, bytes: *bytes },
        Arg::InPlace(i) => Arg::ExtraInPlace(i + a_inputs),
        Arg::Output => Arg::ExtraOutput(b.out_shape.clone()),
        Arg::ExtraInPlace(i) => Arg::ExtraInPlace(i + a_inputs),
        other => other.clone(),
    };
    KernelCall { args: b.args.iter().map(shift).collect(), ..b.clone() }
}
