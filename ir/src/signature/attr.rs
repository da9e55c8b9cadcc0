//! An op's attributes as its signature walks them (`Attributes`), the
//! values they hold (`AttrValue`) and their text form (`Attr`).

use crate::shape::{Dim, TensorType};
use crate::DType;

/// An attribute value in the text form.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Token(String),
    List(Vec<Attr>),
}

/// What walks an op's attributes: the printer reads each value, the parser
/// writes it. Every attribute is named by its text key.
pub(crate) trait Attributes {
    /// The op's text name (the first thing every signature states).
    fn name(&mut self, name: &'static str) -> Result<(), String>;
    /// A required attribute.
    fn value<T: AttrValue>(&mut self, key: &'static str, value: &mut T) -> Result<(), String>;
    /// An attribute left out of the text when `None`.
    fn optional<T: AttrValue>(&mut self, key: &'static str, value: &mut Option<T>) -> Result<(), String>;
    /// A boolean left out of the text when false.
    fn flag(&mut self, key: &'static str, value: &mut bool) -> Result<(), String>;
    /// A source's declared type (written after `:`, not as an attribute).
    fn declared_type(&mut self, ty: &mut TensorType) -> Result<(), String>;
    /// The parser's view of which keys the text gives, for an attribute
    /// group whose variant its keys decide (rope scaling); `None` when
    /// printing.
    fn given(&self, key: &str) -> Option<bool>;
}

/// A value an attribute holds, and its text form.
pub(crate) trait AttrValue: Sized {
    fn to_attr(&self) -> Attr;
    fn from_attr(attr: Attr) -> Result<Self, String>;
}

fn token(attr: Attr) -> Result<String, String> {
    match attr {
        Attr::Token(t) => Ok(t),
        other => Err(format!("must be a plain value, found {other:?}")),
    }
}

fn parsed<T: std::str::FromStr>(attr: Attr) -> Result<T, String> {
    let t = token(attr)?;
    t.parse().map_err(|_| format!("cannot read `{t}`"))
}

impl AttrValue for f32 {
    fn to_attr(&self) -> Attr {
        // `{:?}` is the shortest text that parses back to the same bits.
        Attr::Token(format!("{self:?}"))
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        parsed(attr)
    }
}

macro_rules! plain_attr_value {
    ($($t:ty),*) => {$(
        impl AttrValue for $t {
            fn to_attr(&self) -> Attr {
                Attr::Token(self.to_string())
            }
            fn from_attr(attr: Attr) -> Result<Self, String> {
                parsed(attr)
            }
        }
    )*};
}
plain_attr_value!(usize, u64, bool);

impl AttrValue for Dim {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.to_string())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        let t = token(attr)?;
        Dim::parse(&t).ok_or_else(|| format!("`{t}` is not a dimension"))
    }
}

impl AttrValue for String {
    fn to_attr(&self) -> Attr {
        Attr::Str(self.clone())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        match attr {
            Attr::Str(s) => Ok(s),
            other => Err(format!("must be a quoted string, found {other:?}")),
        }
    }
}

impl AttrValue for DType {
    fn to_attr(&self) -> Attr {
        Attr::Token(self.name().into())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        let t = token(attr)?;
        DType::from_name(&t).ok_or_else(|| format!("unknown dtype `{t}`"))
    }
}

impl<T: AttrValue> AttrValue for Vec<T> {
    fn to_attr(&self) -> Attr {
        Attr::List(self.iter().map(T::to_attr).collect())
    }
    fn from_attr(attr: Attr) -> Result<Self, String> {
        match attr {
            Attr::List(items) => items.into_iter().map(T::from_attr).collect(),
            other => Err(format!("must be a list, found {other:?}")),
        }
    }
}

/// An enum attribute spelled by a fixed word per variant.
pub(crate) fn word_attr<T: Copy + PartialEq>(words: &[(T, &str)], attr: Attr, what: &str) -> Result<T, String> {
    let t = token(attr)?;
    words.iter().find(|(_, w)| *w == t).map(|(v, _)| *v).ok_or_else(|| {
        let all: Vec<String> = words.iter().map(|(_, w)| format!("`{w}`")).collect();
        format!("unknown {what} `{t}` (one of {})", all.join(", "))
    })
}
