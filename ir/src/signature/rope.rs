//! Rotary position embedding, and the per-head q/k norm the `norm-rope`
//! rule fuses in front of it.

use super::attr::{word_attr, Attr, AttrValue, Attributes};
use super::check::{arity, need_float, need_rank, other_kind, same_dim};
use crate::op::{NormKind, Op, RopeScaling, RopeStyle};
use crate::shape::TensorType;
use crate::DType;

impl AttrValue for RopeStyle {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.name().into())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        word_attr(&[RopeStyle::Neox, RopeStyle::GptJ].map(|s| (s, s.name())), attr, "rope style")
    }
}

pub(super) fn prototypes() -> Vec<Op> {
    let (style, rotary_dim, theta, scaling) = (RopeStyle::Neox, 0, 0.0, RopeScaling::None);
    vec![Op::Rope { style, rotary_dim, theta, scaling: scaling.clone() }, Op::NormRope { eps: 0.0, style, rotary_dim, theta, scaling }]
}

pub(super) fn attributes<A: Attributes>(op: &mut Op, a: &mut A) -> Result<(), String> {
    match op {
        Op::Rope { style, rotary_dim, theta, scaling } => {
            a.name("rope")?;
            rotation(a, style, rotary_dim, theta, scaling)
        }
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            a.name("norm_rope")?;
            a.value("eps", eps)?;
            rotation(a, style, rotary_dim, theta, scaling)
        }
        _ => other_kind(op),
    }
}

/// The attributes `rope`, `norm_rope` and `qkv_rope` share. The scaling's keys name
/// its variant: none, `linear_factor`, `freq_factors` with
/// `attention_factor`, `llama3_factor` with the llama3 parameters,
/// `yarn_factor` with YaRN's, or `proportional_pairs`.
pub(super) fn rotation<A: Attributes>(
    a: &mut A,
    style: &mut RopeStyle,
    rotary_dim: &mut usize,
    theta: &mut f32,
    scaling: &mut RopeScaling,
) -> Result<(), String> {
    a.value("style", style)?;
    a.value("rotary_dim", rotary_dim)?;
    a.value("theta", theta)?;
    let kinds = [a.given("linear_factor"), a.given("freq_factors"), a.given("llama3_factor"), a.given("yarn_factor"), a.given("proportional_pairs")];
    if let Some(given) = kinds.into_iter().collect::<Option<Vec<bool>>>() {
        *scaling = match given[..] {
            [false, false, false, false, false] => RopeScaling::None,
            [true, false, false, false, false] => RopeScaling::Linear { factor: 0.0 },
            [false, true, false, false, false] => RopeScaling::FreqFactors { factors: vec![], attention_factor: 0.0 },
            [false, false, true, false, false] => {
                RopeScaling::Llama3 { factor: 0.0, low_freq_factor: 0.0, high_freq_factor: 0.0, original_context: 0 }
            }
            [false, false, false, true, false] => {
                RopeScaling::Yarn { factor: 0.0, original_context: 0, beta_fast: 0.0, beta_slow: 0.0, attention_factor: 0.0, truncate: false }
            }
            [false, false, false, false, true] => RopeScaling::Proportional { rotated_pairs: 0 },
            _ => {
                return Err("`rope` takes at most one of `linear_factor`, `freq_factors`, `llama3_factor`, `yarn_factor`, `proportional_pairs`".into())
            }
        };
    }
    match scaling {
        RopeScaling::None => Ok(()),
        RopeScaling::Linear { factor } => a.value("linear_factor", factor),
        RopeScaling::FreqFactors { factors, attention_factor } => {
            a.value("freq_factors", factors)?;
            a.value("attention_factor", attention_factor)
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
            a.value("llama3_factor", factor)?;
            a.value("low_freq_factor", low_freq_factor)?;
            a.value("high_freq_factor", high_freq_factor)?;
            a.value("original_context", original_context)
        }
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor, truncate } => {
            a.value("yarn_factor", factor)?;
            a.value("original_context", original_context)?;
            a.value("beta_fast", beta_fast)?;
            a.value("beta_slow", beta_slow)?;
            a.value("attention_factor", attention_factor)?;
            a.flag("truncate", truncate)
        }
        RopeScaling::Proportional { rotated_pairs } => a.value("proportional_pairs", rotated_pairs),
    }
}

pub(super) fn infer(op: &Op, tys: &[TensorType]) -> Result<TensorType, String> {
    let t = |i: usize| &tys[i];
    match op {
        Op::Rope { rotary_dim, scaling, .. } => {
            arity(tys, 2..=2)?;
            need_float("rope input", t(0))?;
            need_rank("rope input", t(0), 4)?;
            need_rank("rope positions", t(1), 2)?;
            if t(1).dtype != DType::I32 {
                return Err(format!("rope positions must be i32, found {}", t(1)));
            }
            same_dim("rope positions batch", &t(1).shape[0], &t(0).shape[0])?;
            same_dim("rope positions seq", &t(1).shape[1], &t(0).shape[2])?;
            if let Some(d) = t(0).shape[3].as_const() {
                if *rotary_dim as i64 > d || rotary_dim % 2 == 1 || *rotary_dim == 0 {
                    return Err(format!("rotary_dim {rotary_dim} must be even and at most head_dim {d}"));
                }
            }
            check_scaling(*rotary_dim, scaling)?;
            Ok(t(0).clone())
        }
        Op::NormRope { eps, style, rotary_dim, theta, scaling } => {
            // Typed as what it replaces, step by step.
            arity(tys, 3..=3)?;
            need_rank("norm_rope input", t(0), 4)?;
            let normed = super::norm::infer(&Op::Norm { kind: NormKind::Rms, eps: *eps }, &tys[..2])?;
            let heads_major = super::layout::infer(&Op::Permute { perm: vec![0, 2, 1, 3] }, &[normed])?;
            let rope = Op::Rope { style: *style, rotary_dim: *rotary_dim, theta: *theta, scaling: scaling.clone() };
            infer(&rope, &[heads_major, t(2).clone()])
        }
        _ => other_kind(op),
    }
}

fn check_scaling(rotary_dim: usize, scaling: &RopeScaling) -> Result<(), String> {
    match scaling {
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
            let ok = |f: &f32| f.is_finite() && *f > 0.0;
            if !(ok(factor) && ok(low_freq_factor) && ok(high_freq_factor) && high_freq_factor > low_freq_factor && *original_context > 0) {
                return Err(format!(
                    "llama3 rope scaling needs positive factors with high_freq_factor > low_freq_factor and original_context > 0, found factor {factor}, low {low_freq_factor}, high {high_freq_factor}, original_context {original_context}"
                ));
            }
        }
        RopeScaling::FreqFactors { factors, attention_factor } => {
            if factors.len() != rotary_dim / 2 {
                return Err(format!(
                    "rope has {} freq_factors for rotary_dim {rotary_dim}: one per feature pair ({}) is needed",
                    factors.len(),
                    rotary_dim / 2
                ));
            }
            if let Some(f) = factors.iter().chain([attention_factor]).find(|f| !(f.is_finite() && **f > 0.0)) {
                return Err(format!("rope scaling factor {f} is not a positive finite number"));
            }
        }
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor, .. } => {
            let ok = |f: &f32| f.is_finite() && *f > 0.0;
            if !(ok(factor) && ok(beta_fast) && ok(beta_slow) && ok(attention_factor) && *original_context > 0) {
                return Err(format!(
                    "yarn rope scaling needs positive factors and original_context > 0, found factor {factor}, beta_fast {beta_fast}, beta_slow {beta_slow}, attention_factor {attention_factor}, original_context {original_context}"
                ));
            }
        }
        RopeScaling::Proportional { rotated_pairs } => {
            if *rotated_pairs > rotary_dim / 2 {
                return Err(format!("proportional rope turns {rotated_pairs} pairs of a rotary_dim of {rotary_dim}: at most {}", rotary_dim / 2));
            }
        }
        RopeScaling::None | RopeScaling::Linear { .. } => {}
    }
    Ok(())
}
