//! Elementwise kernels: unary functions, clamps, broadcasting binaries, the
//! gated-MLP product `act(gate) * up` (SwiGLU / GeGLU), and fused chains of
//! unary and binary ops (one kernel for `c * tanh(x / c)` and the like). The unary functions
//! are spelled out here once (`unary_expr`), in the reference executor's
//! formulas, for every target.

use super::{thread_index, unravel4, WORKGROUP};
use crate::kir::*;
use graphc_ir::{BinaryOp, ChainExpr, UnaryOp};

/// `act(x)` for a scalar expression `x` (a local: it is read several times).
pub fn unary_expr(op: UnaryOp, x: Expr) -> Expr {
    let sigmoid = |x: Expr| f(1.0) / (f(1.0) + call(Func::Exp, vec![-x]));
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => call(Func::Exp, vec![x]),
        UnaryOp::Sqrt => call(Func::Sqrt, vec![x]),
        UnaryOp::Rsqrt => f(1.0) / call(Func::Sqrt, vec![x]),
        UnaryOp::Recip => f(1.0) / x,
        UnaryOp::Tanh => tanh(x),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Silu => x.clone() / (f(1.0) + call(Func::Exp, vec![-x])),
        UnaryOp::GeluTanh => {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            let inner = f(c) * (x.clone() + f(0.044715) * x.clone() * x.clone() * x.clone());
            f(0.5) * x * (f(1.0) + tanh(inner))
        }
        UnaryOp::GeluErf => f(0.5) * x.clone() * (f(1.0) + erf(x * f(std::f32::consts::FRAC_1_SQRT_2))),
        UnaryOp::Softplus => select(x.clone().gt(f(20.0)), x.clone(), call(Func::Log, vec![f(1.0) + call(Func::Exp, vec![x])])),
    }
}

/// `erf(z)` by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7):
/// no target has `erf` in WGSL's builtin set.
fn erf(z: Expr) -> Expr {
    let a = call(Func::Abs, vec![z.clone()]);
    let t = f(1.0) / (f(1.0) + f(0.327_591_1) * a.clone());
    let poly = ((((f(1.061_405_4) * t.clone() + f(-1.453_152_1)) * t.clone() + f(1.421_413_7)) * t.clone() + f(-0.284_496_74)) * t.clone()
        + f(0.254_829_6))
        * t;
    let magnitude = f(1.0) - poly * call(Func::Exp, vec![-(a.clone() * a)]);
    select(z.lt(f(0.0)), -magnitude.clone(), magnitude)
}

/// `y[i] = op(x[i])` for `i < n`. Grid: `ceil(n / 256)` groups.
pub fn unary(op: UnaryOp) -> Kernel {
    Kernel::new(&format!("unary_{}", op.name()), WORKGROUP).input("x", Ty::F32).output("y", Ty::F32).param("n", Ty::U32).body(vec![
        let_("i", Ty::U32, thread_index()),
        if_(var("i").lt(param("n")), vec![let_("v", Ty::F32, load("x", var("i"))), store("y", var("i"), unary_expr(op, var("v")))]),
    ])
}

/// `y[i] = min(max(x[i], lo), hi)` for `i < n` (the IR's `clamp`), each
/// bound applied only where the op has it (`lower`, `upper`): params `n`,
/// `lo`, `hi`. Grid: `ceil(n / 256)` groups.
pub fn clamp(lower: bool, upper: bool) -> Kernel {
    let name = match (lower, upper) {
        (true, true) => "clamp",
        (true, false) => "clamp_min",
        (false, true) => "clamp_max",
        (false, false) => "clamp_none",
    };
    let mut v = var("v");
    if lower {
        v = v.max(param("lo"));
    }
    if upper {
        v = v.min(param("hi"));
    }
    Kernel::new(name, WORKGROUP).input("x", Ty::F32).output("y", Ty::F32).param("n", Ty::U32).param("lo", Ty::F32).param("hi", Ty::F32).body(vec![
        let_("i", Ty::U32, thread_index()),
        if_(var("i").lt(param("n")), vec![let_("v", Ty::F32, load("x", var("i"))), store("y", var("i"), v)]),
    ])
}

/// `y = op(a, b)` with numpy broadcasting, up to rank 4: the output is
/// `[n / (d1 d2 d3), d1, d2, d3]`; `a` and `b` are read through element
/// strides `sa*`, `sb*` (0 along a broadcast axis). Grid: `ceil(n / 256)`.
pub fn binary(op: BinaryOp) -> Kernel {
    let mut k =
        Kernel::new(&format!("binary_{}", op.name()), WORKGROUP).input("a", Ty::F32).input("b", Ty::F32).output("y", Ty::F32).param("n", Ty::U32);
    for p in ["d1", "d2", "d3", "sa0", "sa1", "sa2", "sa3", "sb0", "sb1", "sb2", "sb3"] {
        k = k.param(p, Ty::U32);
    }
    let offset = |s: &str| {
        var("i0") * param(&format!("{s}0"))
            + var("i1") * param(&format!("{s}1"))
            + var("i2") * param(&format!("{s}2"))
            + var("i3") * param(&format!("{s}3"))
    };
    let (a, b) = (load("a", offset("sa")), load("b", offset("sb")));
    let value = match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
    };
    k.body(vec![
        let_("i", Ty::U32, thread_index()),
        if_(var("i").lt(param("n")), unravel4().into_iter().chain([store("y", var("i"), value)]).collect()),
    ])
}

/// `y[i] = act(gate[i]) * up[i]` for `i < n`. Grid: `ceil(n / 256)`.
pub fn glu(act: UnaryOp) -> Kernel {
    Kernel::new(&format!("glu_{}", act.name()), WORKGROUP).input("gate", Ty::F32).input("up", Ty::F32).output("y", Ty::F32).param("n", Ty::U32).body(
        vec![
            let_("i", Ty::U32, thread_index()),
            if_(
                var("i").lt(param("n")),
                vec![let_("g", Ty::F32, load("gate", var("i"))), store("y", var("i"), unary_expr(act, var("g")) * load("up", var("i")))],
            ),
        ],
    )
}

/// Statements computing a `chain` op's expression into locals `t0, t1,
/// ...` in post order (each op's arithmetic as its own kernel has it);
/// returns the local holding the result. The unfused kernels store each
/// op's value before the next reads it, so every value is as stored
/// (`Func::Stored`; products, adds and subtractions the rounded forms): no
/// product may be contracted with a later add (CUDA would make the two one
/// FMA), nor reassociated with what reads it.
fn emit(expr: &ChainExpr, body: &mut Vec<Stmt>) -> Expr {
    let stored = |x: Expr| call(Func::Stored, vec![x]);
    let value = match expr {
        ChainExpr::Input(i) => load(&format!("in{i}"), var(&format!("at{i}"))),
        ChainExpr::Unary(u, a) => stored(unary_expr(*u, emit(a, body))),
        ChainExpr::Binary(b, x, y) => {
            let (x, y) = (emit(x, body), emit(y, body));
            match b {
                BinaryOp::Add => call(Func::AddRounded, vec![x, y]),
                BinaryOp::Sub => call(Func::SubRounded, vec![x, y]),
                BinaryOp::Mul => call(Func::MulRounded, vec![x, y]),
                BinaryOp::Div => stored(x / y),
                BinaryOp::Max => stored(x.max(y)),
                BinaryOp::Min => stored(x.min(y)),
            }
        }
    };
    let name = format!("t{}", body.len());
    body.push(let_(&name, Ty::F32, value));
    var(&name)
}

/// An IR `chain` op in one kernel: `y = expr(in0, .., in{k-1})`
/// over the output `[n / (d1 d2 d3), d1, d2, d3]`, input `i` read through
/// element strides `s{i}_0..3` (0 along a broadcast axis). Buffers
/// `in0..in{k-1}, y`; params `n, d1, d2, d3`, then each input's four
/// strides. Grid: `ceil(n / 256)`. Named by a hash of the chain, so equal
/// chains share one pipeline.
pub fn chain(expr: &ChainExpr, inputs: usize) -> Kernel {
    let text = expr.text();
    let name = format!("chain_{:08x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()) as u32);
    let mut k = Kernel::new(&name, WORKGROUP);
    for i in 0..inputs {
        k = k.input(&format!("in{i}"), Ty::F32);
    }
    k = k.output("y", Ty::F32).param("n", Ty::U32).param("d1", Ty::U32).param("d2", Ty::U32).param("d3", Ty::U32);
    for i in 0..inputs {
        for axis in 0..4 {
            k = k.param(&format!("s{i}_{axis}"), Ty::U32);
        }
    }
    k = k.rounded_ops();
    let mut body = unravel4();
    for i in 0..inputs {
        let s = |axis: u32| param(&format!("s{i}_{axis}"));
        body.push(let_(&format!("at{i}"), Ty::U32, var("i0") * s(0) + var("i1") * s(1) + var("i2") * s(2) + var("i3") * s(3)));
    }
    let mut temps = vec![];
    let result = emit(expr, &mut temps);
    body.extend(temps);
    body.push(store("y", var("i"), result));
    k.body(vec![let_("i", Ty::U32, thread_index()), if_(var("i").lt(param("n")), body)])
}
