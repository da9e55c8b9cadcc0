//! Shapes with symbolic dimensions.
//!
//! A `Dim` is a polynomial with integer coefficients over named symbols
//! (`batch`, `seq`, `past`, `cap`, ...): `576`, `past+seq`, `batch*seq`.
//! Keeping it a normalized polynomial makes equality structural, so the
//! verifier can check `reshape [batch, seq, 576] -> [batch*seq, 576]` or
//! `concat(past, seq) = past+seq` without knowing any value, and one plan
//! serves every context length.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Monomial (sorted symbol names, repeated for powers) → coefficient.
/// The empty monomial is the constant term. Zero coefficients are never stored.
#[derive(Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize, PartialOrd, Ord)]
pub struct Dim(BTreeMap<Vec<String>, i64>);

impl Dim {
    pub fn konst(n: i64) -> Dim {
        let mut m = BTreeMap::new();
        if n != 0 {
            m.insert(vec![], n);
        }
        Dim(m)
    }

    pub fn sym(name: &str) -> Dim {
        let mut m = BTreeMap::new();
        m.insert(vec![name.to_string()], 1);
        Dim(m)
    }

    pub fn as_const(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    pub fn is_const(&self, n: i64) -> bool {
        self.as_const() == Some(n)
    }

    pub fn add(&self, other: &Dim) -> Dim {
        let mut m = self.0.clone();
        for (k, v) in &other.0 {
            let e = m.entry(k.clone()).or_insert(0);
            // Saturating: a file's absurd dims must not panic here; the
            // verifier refuses any dim past `MAX_DIM` (see `check_range`).
            *e = e.saturating_add(*v);
            if *e == 0 {
                m.remove(k);
            }
        }
        Dim(m)
    }

    pub fn sub(&self, other: &Dim) -> Dim {
        self.add(&other.scale(-1))
    }

    pub fn scale(&self, c: i64) -> Dim {
        if c == 0 {
            return Dim::default();
        }
        Dim(self.0.iter().map(|(k, v)| (k.clone(), v.saturating_mul(c))).collect())
    }

    pub fn mul(&self, other: &Dim) -> Dim {
        let mut out = Dim::default();
        for (ka, va) in &self.0 {
            for (kb, vb) in &other.0 {
                let mut k: Vec<String> = ka.iter().chain(kb.iter()).cloned().collect();
                k.sort();
                let mut m = BTreeMap::new();
                m.insert(k, va.saturating_mul(*vb));
                out = out.add(&Dim(m));
            }
        }
        out
    }

    /// The symbols this dim mentions.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.0.keys().flat_map(|k| k.iter().map(|s| s.as_str()))
    }

    /// Evaluate with concrete symbol values; an error names an unbound symbol or says it overflowed.
    pub fn eval(&self, env: &HashMap<String, i64>) -> Result<i64, String> {
        let mut total = 0i64;
        for (k, v) in &self.0 {
            let mut term = *v;
            for s in k {
                let v = *env.get(s).ok_or_else(|| format!("`{s}` is unbound"))?;
                term = term.checked_mul(v).ok_or_else(|| format!("{self} overflows i64"))?;
            }
            total = total.checked_add(term).ok_or_else(|| format!("{self} overflows i64"))?;
        }
        Ok(total)
    }

    /// Parse `3*seq+past+1`, `batch*seq`, `576`. Only `+` and `*` (and a
    /// leading `-` on a term) are accepted.
    pub fn parse(text: &str) -> Option<Dim> {
        let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        if text.is_empty() {
            return None;
        }
        let mut out = Dim::default();
        let mut terms: Vec<(i64, &str)> = Vec::new();
        let mut start = 0;
        let bytes = text.as_bytes();
        let mut sign = 1;
        for i in 0..=bytes.len() {
            if i == bytes.len() || ((bytes[i] == b'+' || bytes[i] == b'-') && i > 0) {
                terms.push((sign, &text[start..i]));
                if i < bytes.len() {
                    sign = if bytes[i] == b'-' { -1 } else { 1 };
                }
                start = i + 1;
            } else if i == 0 && bytes[0] == b'-' {
                sign = -1;
                start = 1;
            }
        }
        for (sign, term) in terms {
            let mut t = Dim::konst(sign);
            for factor in term.split('*') {
                if factor.is_empty() {
                    return None;
                }
                let f = if let Ok(n) = factor.parse::<i64>() {
                    Dim::konst(n)
                } else if factor.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && factor.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                {
                    Dim::sym(factor)
                } else {
                    return None;
                };
                t = t.mul(&f);
            }
            out = out.add(&t);
        }
        Some(out)
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::konst(n as i64)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0");
        }
        // Highest degree first, constant last: `batch*seq+past+1`.
        let mut terms: Vec<(&Vec<String>, &i64)> = self.0.iter().collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        for (i, (k, v)) in terms.iter().enumerate() {
            let v = **v;
            if i > 0 {
                f.write_str(if v < 0 { "-" } else { "+" })?;
            } else if v < 0 {
                f.write_str("-")?;
            }
            let a = v.abs();
            if k.is_empty() {
                write!(f, "{a}")?;
            } else {
                if a != 1 {
                    write!(f, "{a}*")?;
                }
                f.write_str(&k.join("*"))?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

pub type Shape = Vec<Dim>;

/// Product of all dims.
/// The largest constant a dim may have, and the most elements a shape's
/// constant part may hold: far past any model, far below where i64
/// arithmetic on dims could saturate.
pub const MAX_DIM: i64 = 1 << 40;
pub const MAX_CONST_ELEMS: i64 = 1 << 48;

/// Refuse a shape with a constant dim outside `0..=MAX_DIM`, a coefficient
/// past it, or constant dims whose product passes `MAX_CONST_ELEMS`.
pub fn check_range(shape: &[Dim]) -> Result<(), String> {
    let mut elems: i64 = 1;
    for d in shape {
        if d.0.values().any(|c| c.unsigned_abs() > MAX_DIM as u64) {
            return Err(format!("dimension `{d}` is out of range (constants up to 2^40)"));
        }
        if let Some(c) = d.as_const() {
            if c < 0 {
                return Err(format!("dimension `{d}` is negative"));
            }
            elems = elems.saturating_mul(c);
        }
    }
    if elems > MAX_CONST_ELEMS {
        return Err(format!("shape {} holds more than 2^48 elements", shape_to_string(shape)));
    }
    Ok(())
}

pub fn numel(shape: &[Dim]) -> Dim {
    shape.iter().fold(Dim::konst(1), |acc, d| acc.mul(d))
}

pub fn shape_to_string(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

pub fn const_shape(dims: &[usize]) -> Shape {
    dims.iter().map(|&d| Dim::from(d)).collect()
}

/// A dtype with a shape: the type of one SSA value.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub dtype: crate::DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: crate::DType, shape: Shape) -> Self {
        TensorType { dtype, shape }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, shape_to_string(&self.shape))
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polynomial_round_trip() {
        for s in ["576", "past+seq", "batch*seq", "2*batch*seq+past-1", "0", "-3"] {
            let d = Dim::parse(s).unwrap();
            assert_eq!(d.to_string(), s, "{s}");
        }
        assert_eq!(Dim::parse("seq+past").unwrap(), Dim::parse("past+seq").unwrap());
        assert_eq!(Dim::sym("batch").mul(&Dim::sym("seq")).mul(&Dim::konst(576)), numel(&[Dim::parse("batch*seq").unwrap(), 576usize.into()]));
        assert!(Dim::parse("a/b").is_none());
        assert!(Dim::parse("").is_none());
    }
}
