//! The kernel IR: one description of a GPU kernel, from which the WGSL and
//! CUDA C emitters (and, through naga, MSL) are generated.
//!
//! It is deliberately small — scalars, typed buffers, workgroup arrays,
//! structured loops and a barrier — the level at which a fused kernel is
//! *written*: index math, loads and stores, reductions in workgroup memory.
//! Every kernel runs as a grid of 1-D workgroups; a kernel reads its
//! workgroup's index with [`group_index`] (the host spreads more than 65535
//! groups over two grid axes, which that index undoes).
//!
//! Writing the kernel once and emitting it per target is the point: the
//! per-target copies engines write by hand drift apart and ship bugs on one
//! backend only.

use std::ops;

/// A scalar type. Buffers hold one of `F32`, `I32`, `U32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    F32,
    I32,
    U32,
    Bool,
}

/// Invocation coordinates (axis 0 unless the kernel says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// Index of the invocation inside its workgroup.
    LocalId,
    /// Index of the workgroup in the grid, per axis.
    GroupId,
    /// Workgroups in the grid, per axis.
    NumGroups,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Min,
    Max,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    BitAnd,
    BitOr,
    Shl,
    Shr,
}

/// Math functions every target has (or that the emitters spell out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    Exp,
    Log,
    Sqrt,
    InvSqrt,
    Tanh,
    Sin,
    Cos,
    Abs,
    Pow,
    /// `f32` from the low 16 bits of a `u32`, read as an IEEE half.
    HalfToF32,
    /// `f32` with the bit pattern of a `u32`.
    BitsToF32,
    /// `a * b` rounded to f32 and never contracted into a fused
    /// multiply-add with what uses it (CUDA's `__fmul_rn`): where a fused
    /// kernel adds a product the unfused kernels store first, the sum must
    /// see the stored (rounded) product to give the same bits. A kernel
    /// using the rounded forms declares the parameter `ROUNDING_ONE`
    /// (`Kernel::rounded_ops`; checked): WGSL and MSL have no
    /// non-contracting multiply, so there the product passes through
    /// `Stored`'s barrier, which no compiler can see through.
    MulRounded,
    /// `a + b` and `a - b` never contracted with a product feeding them
    /// (CUDA's `__fadd_rn`, `__fsub_rn`; elsewhere each operand and the
    /// sum through `Stored`'s barrier, for the same reason): a fused
    /// chain's add of what an earlier op of the chain multiplied.
    AddRounded,
    SubRounded,
    /// `a`, as a store and a load would leave it: what reads it cannot be
    /// rewritten with the arithmetic that made it (a product's
    /// reassociation with a later `exp`'s scaling by `log2 e`, which
    /// lavapipe does to `exp((a·b)·1.0)`). WGSL and MSL xor its bits with
    /// `bits(ROUNDING_ONE) ^ bits(1.0)`, a zero no compiler can know;
    /// CUDA (no reassociation; `--fmad=false`) writes `a`.
    Stored,
}

/// The f32 parameter, always 1.0, that kernels using `Func::MulRounded`,
/// `AddRounded` or `SubRounded` declare (`Kernel::rounded_ops`) and every
/// launch binds (`device::ROUNDING_ONE_VALUE`).
pub const ROUNDING_ONE: &str = "rounding_one";

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    F32(f32),
    I32(i32),
    U32(u32),
    Bool(bool),
    /// A local variable or loop counter.
    Var(String),
    /// A scalar kernel parameter.
    Param(String),
    Builtin(Builtin, u8),
    /// `buffer[index]` of a global buffer.
    Load(String, Box<Expr>),
    /// `array[index]` of a workgroup array.
    LoadShared(String, Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Call(Func, Vec<Expr>),
    /// Numeric conversion (float→int rounds toward zero).
    Cast(Ty, Box<Expr>),
    /// `if cond { a } else { b }`, both evaluated.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Declares a mutable local.
    Let {
        name: String,
        ty: Ty,
        value: Expr,
    },
    Assign {
        name: String,
        value: Expr,
    },
    Store {
        buffer: String,
        index: Expr,
        value: Expr,
    },
    StoreShared {
        array: String,
        index: Expr,
        value: Expr,
    },
    /// `for (var = start; var < end; var += step)`, counters of type `ty`.
    For {
        var: String,
        ty: Ty,
        start: Expr,
        end: Expr,
        step: Expr,
        body: Vec<Stmt>,
    },
    /// `for (var = start; var > 0; var >>= 1)` (u32): a tree reduction's strides.
    Halving {
        var: String,
        start: Expr,
        body: Vec<Stmt>,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Vec<Stmt>,
    },
    /// Every invocation of the workgroup waits here; workgroup memory
    /// written before it is visible after it. Only in uniform control flow.
    Barrier,
}

/// A global buffer argument.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub elem: Ty,
    pub writable: bool,
}

/// A workgroup-memory array.
#[derive(Clone, Debug, PartialEq)]
pub struct Shared {
    pub name: String,
    pub elem: Ty,
    pub len: u32,
}

/// One kernel: its arguments (buffers, then scalar parameters, in binding
/// order), its workgroup size and memory, and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub workgroup_size: u32,
    pub buffers: Vec<Buffer>,
    pub params: Vec<(String, Ty)>,
    pub shared: Vec<Shared>,
    pub body: Vec<Stmt>,
}

impl Kernel {
    pub fn new(name: &str, workgroup_size: u32) -> Kernel {
        Kernel { name: name.into(), workgroup_size, buffers: vec![], params: vec![], shared: vec![], body: vec![] }
    }
    pub fn input(mut self, name: &str, elem: Ty) -> Self {
        self.buffers.push(Buffer { name: name.into(), elem, writable: false });
        self
    }
    pub fn output(mut self, name: &str, elem: Ty) -> Self {
        self.buffers.push(Buffer { name: name.into(), elem, writable: true });
        self
    }
    pub fn param(mut self, name: &str, ty: Ty) -> Self {
        self.params.push((name.into(), ty));
        self
    }
    /// Declares `ROUNDING_ONE`, which the rounded arithmetic
    /// (`Func::MulRounded`, ...) reads on targets without a non-contracting
    /// multiply. Declare it after the kernel's other parameters: its launch
    /// binds 1.0 last.
    pub fn rounded_ops(self) -> Self {
        self.param(ROUNDING_ONE, Ty::F32)
    }
    pub fn shared(mut self, name: &str, elem: Ty, len: u32) -> Self {
        self.shared.push(Shared { name: name.into(), elem, len });
        self
    }
    pub fn body(mut self, body: Vec<Stmt>) -> Self {
        self.body = body;
        self
    }
}

// ---- building expressions ----

pub fn f(v: f32) -> Expr {
    Expr::F32(v)
}
pub fn u(v: u32) -> Expr {
    Expr::U32(v)
}
pub fn i(v: i32) -> Expr {
    Expr::I32(v)
}
pub fn var(name: &str) -> Expr {
    Expr::Var(name.into())
}
pub fn param(name: &str) -> Expr {
    Expr::Param(name.into())
}
pub fn local_id() -> Expr {
    Expr::Builtin(Builtin::LocalId, 0)
}
/// The workgroup's linear index: `group.x + group.y * groups.x`.
pub fn group_index() -> Expr {
    Expr::Builtin(Builtin::GroupId, 0) + Expr::Builtin(Builtin::GroupId, 1) * Expr::Builtin(Builtin::NumGroups, 0)
}
pub fn load(buffer: &str, index: Expr) -> Expr {
    Expr::Load(buffer.into(), Box::new(index))
}
pub fn load_shared(array: &str, index: Expr) -> Expr {
    Expr::LoadShared(array.into(), Box::new(index))
}
pub fn call(func: Func, args: Vec<Expr>) -> Expr {
    Expr::Call(func, args)
}
pub fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
    Expr::Select(Box::new(cond), Box::new(then), Box::new(otherwise))
}
/// `tanh(x)` that no target's fast math can turn into NaN: past |x| = 15
/// it is ±1 (what f32 `tanh` rounds to from |x| ≈ 9 on, so nothing
/// changes), where Metal's default fast `tanh` overflows `exp` to NaN. A
/// NaN input still gives NaN. Every kernel's `tanh` goes through this.
pub fn tanh(x: Expr) -> Expr {
    select(call(Func::Abs, vec![x.clone()]).gt(f(15.0)), select(x.clone().gt(f(0.0)), f(1.0), f(-1.0)), call(Func::Tanh, vec![x]))
}

impl Expr {
    fn bin(self, op: BinOp, rhs: Expr) -> Expr {
        Expr::Bin(op, Box::new(self), Box::new(rhs))
    }
    pub fn lt(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Lt, rhs)
    }
    pub fn le(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Le, rhs)
    }
    pub fn gt(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Gt, rhs)
    }
    pub fn ge(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Ge, rhs)
    }
    pub fn eq(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Eq, rhs)
    }
    pub fn ne(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Ne, rhs)
    }
    pub fn and(self, rhs: Expr) -> Expr {
        self.bin(BinOp::And, rhs)
    }
    pub fn or(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Or, rhs)
    }
    pub fn min(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Min, rhs)
    }
    pub fn max(self, rhs: Expr) -> Expr {
        self.bin(BinOp::Max, rhs)
    }
    pub fn cast(self, ty: Ty) -> Expr {
        Expr::Cast(ty, Box::new(self))
    }
}

impl ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Not(Box::new(self))
    }
}

macro_rules! bin_ops {
    ($($tr:ident $method:ident $op:ident),*) => {$(
        impl ops::$tr for Expr {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                self.bin(BinOp::$op, rhs)
            }
        }
    )*};
}
bin_ops!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Rem, BitAnd bitand BitAnd, BitOr bitor BitOr, Shl shl Shl, Shr shr Shr);

impl ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Neg(Box::new(self))
    }
}

// ---- building statements ----

pub fn let_(name: &str, ty: Ty, value: Expr) -> Stmt {
    Stmt::Let { name: name.into(), ty, value }
}
pub fn assign(name: &str, value: Expr) -> Stmt {
    Stmt::Assign { name: name.into(), value }
}
pub fn store(buffer: &str, index: Expr, value: Expr) -> Stmt {
    Stmt::Store { buffer: buffer.into(), index, value }
}
pub fn store_shared(array: &str, index: Expr, value: Expr) -> Stmt {
    Stmt::StoreShared { array: array.into(), index, value }
}
/// `for var in start..end` stepping by `step` (u32 counters).
pub fn for_(var: &str, start: Expr, end: Expr, step: Expr, body: Vec<Stmt>) -> Stmt {
    Stmt::For { var: var.into(), ty: Ty::U32, start, end, step, body }
}
pub fn if_(cond: Expr, then: Vec<Stmt>) -> Stmt {
    Stmt::If { cond, then, otherwise: vec![] }
}
pub fn if_else(cond: Expr, then: Vec<Stmt>, otherwise: Vec<Stmt>) -> Stmt {
    Stmt::If { cond, then, otherwise }
}

/// A workgroup tree reduction of `value` (one per invocation) over the
/// `array` of `workgroup_size` slots; every invocation then reads the
/// result from `array[0]`. `combine` is `Add` or `Max`. The workgroup size
/// must be a power of two.
pub fn workgroup_reduce(array: &str, workgroup_size: u32, value: Expr, combine: BinOp) -> Vec<Stmt> {
    segmented_reduce(array, workgroup_size, workgroup_size, value, combine)
}

/// The reduction of `workgroup_reduce` within each run of `segment`
/// consecutive invocations (a power of two): segment `s`'s result is in
/// `array[s · segment]`. Every invocation must reach it (it has barriers).
pub fn segmented_reduce(array: &str, workgroup_size: u32, segment: u32, value: Expr, combine: BinOp) -> Vec<Stmt> {
    assert!(workgroup_size.is_power_of_two(), "workgroup size {workgroup_size} is not a power of two");
    assert!(segment.is_power_of_two() && segment <= workgroup_size, "segment {segment} of a workgroup of {workgroup_size}");
    let step = format!("{array}_stride");
    let lane = if segment == workgroup_size { local_id() } else { local_id() % u(segment) };
    vec![
        Stmt::Barrier,
        store_shared(array, local_id(), value),
        Stmt::Barrier,
        Stmt::Halving {
            var: step.clone(),
            start: u(segment / 2),
            body: vec![
                if_(
                    lane.lt(var(&step)),
                    vec![store_shared(array, local_id(), load_shared(array, local_id()).bin(combine, load_shared(array, local_id() + var(&step))))],
                ),
                Stmt::Barrier,
            ],
        },
    ]
}

// ---- typing ----

/// Why a kernel is ill-typed, naming the kernel and the offending piece.
#[derive(Debug, thiserror::Error)]
#[error("kernel `{kernel}`: {message}")]
pub struct KernelError {
    pub kernel: String,
    pub message: String,
}

/// Local names in scope while walking a kernel body, with their types.
#[derive(Clone, Default)]
pub struct Scope {
    locals: Vec<(String, Ty)>,
}

impl Scope {
    pub fn declare(&mut self, name: &str, ty: Ty) {
        self.locals.push((name.into(), ty));
    }
    pub fn get(&self, name: &str) -> Option<Ty> {
        self.locals.iter().rev().find(|(n, _)| n == name).map(|(_, t)| *t)
    }
}

impl Kernel {
    fn err(&self, message: String) -> KernelError {
        KernelError { kernel: self.name.clone(), message }
    }

    /// The type of `e` in `scope`, or the first type error in it. Both
    /// emitters rely on it: WGSL has no implicit conversions, so a kernel
    /// that type-checks here is spelled the same way on every target.
    pub fn type_of(&self, e: &Expr, scope: &Scope) -> Result<Ty, KernelError> {
        Ok(match e {
            Expr::F32(_) => Ty::F32,
            Expr::I32(_) => Ty::I32,
            Expr::U32(_) => Ty::U32,
            Expr::Bool(_) => Ty::Bool,
            Expr::Var(n) => scope.get(n).ok_or_else(|| self.err(format!("unknown local `{n}`")))?,
            Expr::Param(n) => {
                self.params.iter().find(|(p, _)| p == n).map(|(_, t)| *t).ok_or_else(|| self.err(format!("unknown parameter `{n}`")))?
            }
            Expr::Builtin(..) => Ty::U32,
            Expr::Load(b, idx) => {
                self.expect(idx, scope, Ty::U32, "a buffer index")?;
                self.buffers.iter().find(|x| &x.name == b).ok_or_else(|| self.err(format!("unknown buffer `{b}`")))?.elem
            }
            Expr::LoadShared(a, idx) => {
                self.expect(idx, scope, Ty::U32, "a workgroup-array index")?;
                self.shared.iter().find(|x| &x.name == a).ok_or_else(|| self.err(format!("unknown workgroup array `{a}`")))?.elem
            }
            Expr::Bin(op, a, b) => {
                let (ta, tb) = (self.type_of(a, scope)?, self.type_of(b, scope)?);
                match op {
                    BinOp::Shl | BinOp::Shr => {
                        if tb != Ty::U32 || !matches!(ta, Ty::U32 | Ty::I32) {
                            return Err(self.err(format!("shift of {ta:?} by {tb:?} (needs an integer by a u32)")));
                        }
                        ta
                    }
                    _ if ta != tb => return Err(self.err(format!("{op:?} of {ta:?} and {tb:?}"))),
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => Ty::Bool,
                    BinOp::And | BinOp::Or if ta != Ty::Bool => return Err(self.err(format!("{op:?} of {ta:?}"))),
                    BinOp::BitAnd | BinOp::BitOr | BinOp::Rem if !matches!(ta, Ty::U32 | Ty::I32) => {
                        return Err(self.err(format!("{op:?} of {ta:?}")))
                    }
                    _ => ta,
                }
            }
            Expr::Neg(a) => self.type_of(a, scope)?,
            Expr::Not(a) => self.expect(a, scope, Ty::Bool, "`not`")?,
            Expr::Call(func, args) => {
                let want = match func {
                    Func::HalfToF32 | Func::BitsToF32 => Ty::U32,
                    _ => Ty::F32,
                };
                let rounded = matches!(func, Func::MulRounded | Func::AddRounded | Func::SubRounded | Func::Stored);
                if rounded && !self.params.iter().any(|(p, t)| p == ROUNDING_ONE && *t == Ty::F32) {
                    return Err(self.err(format!("{func:?} needs the f32 parameter `{ROUNDING_ONE}` (Kernel::rounded_ops)")));
                }
                let arity = if (rounded && *func != Func::Stored) || matches!(func, Func::Pow) { 2 } else { 1 };
                if args.len() != arity {
                    return Err(self.err(format!("{func:?} takes {arity} arguments, got {}", args.len())));
                }
                for a in args {
                    self.expect(a, scope, want, &format!("{func:?}'s argument"))?;
                }
                Ty::F32
            }
            Expr::Cast(ty, a) => {
                self.type_of(a, scope)?;
                *ty
            }
            Expr::Select(c, a, b) => {
                self.expect(c, scope, Ty::Bool, "a select condition")?;
                let ta = self.type_of(a, scope)?;
                self.expect(b, scope, ta, "a select's other arm")?
            }
        })
    }

    fn expect(&self, e: &Expr, scope: &Scope, want: Ty, what: &str) -> Result<Ty, KernelError> {
        let got = self.type_of(e, scope)?;
        if got != want {
            return Err(self.err(format!("{what} is {got:?}, expected {want:?}")));
        }
        Ok(got)
    }

    /// Type-checks the whole body (every emitter calls this first).
    pub fn check(&self) -> Result<(), KernelError> {
        if !self.workgroup_size.is_power_of_two() || self.workgroup_size > 256 {
            return Err(self.err(format!("workgroup size {} (a power of two up to 256)", self.workgroup_size)));
        }
        self.check_block(&self.body, &mut Scope::default())
    }

    /// No shadowing: a name declared while an outer one of the same name is
    /// in scope silently changes what later reads of it mean (a real bug
    /// this check was added for: a rotation angle named like the norm
    /// factor the same kernel read after it).
    fn fresh(&self, name: &str, scope: &Scope) -> Result<(), KernelError> {
        if scope.get(name).is_some() {
            return Err(self.err(format!("`{name}` is declared while another `{name}` is in scope")));
        }
        Ok(())
    }

    fn check_block(&self, body: &[Stmt], scope: &mut Scope) -> Result<(), KernelError> {
        for s in body {
            match s {
                Stmt::Let { name, ty, value } => {
                    self.expect(value, scope, *ty, &format!("`{name}`'s initial value"))?;
                    self.fresh(name, scope)?;
                    scope.declare(name, *ty);
                }
                Stmt::Assign { name, value } => {
                    let ty = scope.get(name).ok_or_else(|| self.err(format!("assignment to unknown local `{name}`")))?;
                    self.expect(value, scope, ty, &format!("the value assigned to `{name}`"))?;
                }
                Stmt::Store { buffer, index, value } => {
                    let b = self.buffers.iter().find(|b| &b.name == buffer).ok_or_else(|| self.err(format!("store to unknown buffer `{buffer}`")))?;
                    if !b.writable {
                        return Err(self.err(format!("store to read-only buffer `{buffer}`")));
                    }
                    self.expect(index, scope, Ty::U32, "a buffer index")?;
                    self.expect(value, scope, b.elem, &format!("the value stored to `{buffer}`"))?;
                }
                Stmt::StoreShared { array, index, value } => {
                    let a = self
                        .shared
                        .iter()
                        .find(|a| &a.name == array)
                        .ok_or_else(|| self.err(format!("store to unknown workgroup array `{array}`")))?;
                    self.expect(index, scope, Ty::U32, "a workgroup-array index")?;
                    self.expect(value, scope, a.elem, &format!("the value stored to `{array}`"))?;
                }
                Stmt::For { var, ty, start, end, step, body } => {
                    self.expect(start, scope, *ty, "a loop start")?;
                    self.expect(end, scope, *ty, "a loop end")?;
                    self.expect(step, scope, *ty, "a loop step")?;
                    self.fresh(var, scope)?;
                    let mut inner = scope.clone();
                    inner.declare(var, *ty);
                    self.check_block(body, &mut inner)?;
                }
                Stmt::Halving { var, start, body } => {
                    self.expect(start, scope, Ty::U32, "a halving loop's start")?;
                    self.fresh(var, scope)?;
                    let mut inner = scope.clone();
                    inner.declare(var, Ty::U32);
                    self.check_block(body, &mut inner)?;
                }
                Stmt::If { cond, then, otherwise } => {
                    self.expect(cond, scope, Ty::Bool, "an if condition")?;
                    self.check_block(then, &mut scope.clone())?;
                    self.check_block(otherwise, &mut scope.clone())?;
                }
                Stmt::Barrier => {}
            }
        }
        Ok(())
    }
}
