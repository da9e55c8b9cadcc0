//! The emitters: one walk over a kernel's statements and expressions
//! (here), and per target only the spelling ([`Dialect`]): WGSL and CUDA C.
//! MSL is not spelled by hand: naga translates the validated WGSL module
//! (`msl.rs`), so the Metal kernel is the WGSL kernel, checked by naga's
//! validator on the way.

pub mod cuda;
pub mod msl;
pub mod wgsl;

use crate::kir::{BinOp, Builtin, Expr, Func, Kernel, KernelError, Scope, Stmt, Ty};
use std::fmt::Write;

/// The targets a kernel is emitted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Wgsl,
    Cuda,
    Msl,
}

impl Target {
    pub const ALL: [Target; 3] = [Target::Wgsl, Target::Cuda, Target::Msl];
    pub fn name(self) -> &'static str {
        match self {
            Target::Wgsl => "wgsl",
            Target::Cuda => "cuda",
            Target::Msl => "msl",
        }
    }
    pub fn extension(self) -> &'static str {
        match self {
            Target::Wgsl => "wgsl",
            Target::Cuda => "cu",
            Target::Msl => "metal",
        }
    }
}

/// A kernel's source for one target; WGSL (and so MSL) validated by naga.
pub fn emit(kernel: &Kernel, target: Target) -> Result<String, EmitError> {
    kernel.check()?;
    match target {
        Target::Wgsl => {
            let source = wgsl::emit(kernel);
            msl::validate(kernel, &source)?;
            Ok(source)
        }
        Target::Cuda => Ok(cuda::emit(kernel)),
        Target::Msl => msl::emit(kernel),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("kernel `{kernel}`: naga rejected the emitted WGSL: {message}")]
    Naga { kernel: String, message: String },
}

/// How a target spells the pieces the walker does not.
pub(crate) trait Dialect {
    fn ty(&self, ty: Ty) -> &'static str;
    fn f32_lit(&self, v: f32) -> String;
    fn i32_lit(&self, v: i32) -> String;
    fn u32_lit(&self, v: u32) -> String;
    fn builtin(&self, b: Builtin, axis: u8) -> String;
    fn param(&self, name: &str) -> String;
    fn func(&self, f: Func, args: &[String]) -> String;
    fn min_max(&self, op: BinOp, ty: Ty, a: &str, b: &str) -> String;
    fn cast(&self, ty: Ty, a: &str) -> String;
    fn select(&self, c: &str, a: &str, b: &str) -> String;
    fn declare(&self, name: &str, ty: Ty, value: &str) -> String;
    fn barrier(&self) -> &'static str;
}

/// Writes `kernel.body` in `dialect`, indented one level.
pub(crate) fn body(kernel: &Kernel, dialect: &dyn Dialect) -> String {
    let mut out = String::new();
    let mut walker = Walker { kernel, dialect, scope: Scope::default() };
    walker.block(&kernel.body, 1, &mut out);
    out
}

struct Walker<'a> {
    kernel: &'a Kernel,
    dialect: &'a dyn Dialect,
    scope: Scope,
}

impl Walker<'_> {
    fn ty(&self, e: &Expr) -> Ty {
        self.kernel.type_of(e, &self.scope).expect("emit after check")
    }

    fn block(&mut self, body: &[Stmt], depth: usize, out: &mut String) {
        let saved = self.scope.clone();
        let pad = "    ".repeat(depth);
        let d = self.dialect;
        for s in body {
            match s {
                Stmt::Let { name, ty, value } => {
                    let v = self.expr(value);
                    let _ = writeln!(out, "{pad}{}", d.declare(name, *ty, &v));
                    self.scope.declare(name, *ty);
                }
                Stmt::Assign { name, value } => {
                    let _ = writeln!(out, "{pad}{name} = {};", self.expr(value));
                }
                Stmt::Store { buffer, index, value } | Stmt::StoreShared { array: buffer, index, value } => {
                    let _ = writeln!(out, "{pad}{buffer}[{}] = {};", self.expr(index), self.expr(value));
                }
                Stmt::For { var, ty, start, end, step, body } => {
                    let (s, e, st) = (self.expr(start), self.expr(end), self.expr(step));
                    let decl = d.declare(var, *ty, &s);
                    let _ = writeln!(out, "{pad}for ({} {var} < {e}; {var} = {var} + {st}) {{", decl);
                    self.scope.declare(var, *ty);
                    self.block(body, depth + 1, out);
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::Halving { var, start, body } => {
                    let decl = d.declare(var, Ty::U32, &self.expr(start));
                    let (zero, one) = (d.u32_lit(0), d.u32_lit(1));
                    let _ = writeln!(out, "{pad}for ({decl} {var} > {zero}; {var} = {var} >> {one}) {{");
                    self.scope.declare(var, Ty::U32);
                    self.block(body, depth + 1, out);
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::If { cond, then, otherwise } => {
                    let _ = writeln!(out, "{pad}if ({}) {{", self.expr(cond));
                    self.block(then, depth + 1, out);
                    if !otherwise.is_empty() {
                        let _ = writeln!(out, "{pad}}} else {{");
                        self.block(otherwise, depth + 1, out);
                    }
                    let _ = writeln!(out, "{pad}}}");
                }
                Stmt::Barrier => {
                    let _ = writeln!(out, "{pad}{}", d.barrier());
                }
            }
        }
        self.scope = saved;
    }

    fn expr(&self, e: &Expr) -> String {
        let d = self.dialect;
        match e {
            Expr::F32(v) => d.f32_lit(*v),
            Expr::I32(v) => d.i32_lit(*v),
            Expr::U32(v) => d.u32_lit(*v),
            Expr::Bool(b) => b.to_string(),
            Expr::Var(n) => n.clone(),
            Expr::Param(n) => d.param(n),
            Expr::Builtin(b, axis) => d.builtin(*b, *axis),
            Expr::Load(b, idx) | Expr::LoadShared(b, idx) => format!("{b}[{}]", self.expr(idx)),
            Expr::Bin(op, a, b) => {
                let (sa, sb) = (self.expr(a), self.expr(b));
                let sym = match op {
                    BinOp::Min | BinOp::Max => return d.min_max(*op, self.ty(a), &sa, &sb),
                    BinOp::Add => "+",
                    BinOp::Sub => "-",
                    BinOp::Mul => "*",
                    BinOp::Div => "/",
                    BinOp::Rem => "%",
                    BinOp::Lt => "<",
                    BinOp::Le => "<=",
                    BinOp::Gt => ">",
                    BinOp::Ge => ">=",
                    BinOp::Eq => "==",
                    BinOp::Ne => "!=",
                    BinOp::And => "&&",
                    BinOp::Or => "||",
                    BinOp::BitAnd => "&",
                    BinOp::BitOr => "|",
                    BinOp::Shl => "<<",
                    BinOp::Shr => ">>",
                };
                format!("({sa} {sym} {sb})")
            }
            Expr::Neg(a) => format!("(-{})", self.expr(a)),
            Expr::Not(a) => format!("(!{})", self.expr(a)),
            Expr::Call(f, args) => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                d.func(*f, &args)
            }
            Expr::Cast(ty, a) => d.cast(*ty, &self.expr(a)),
            Expr::Select(c, a, b) => d.select(&self.expr(c), &self.expr(a), &self.expr(b)),
        }
    }
}

/// An f32 literal's digits that read back as the same bits (`{:?}` is
/// shortest round-trip), with a decimal point or exponent so every target
/// parses it as floating point.
pub(crate) fn float_digits(v: f32) -> String {
    let s = format!("{v:?}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

impl crate::kir::Kernel {
    /// A stable hash of the kernel (its emitted WGSL), for pipeline and PTX caches.
    pub fn hash(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(wgsl::emit(self).as_bytes())
    }
}
