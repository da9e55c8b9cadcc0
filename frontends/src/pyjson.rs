//! Python's `json.dumps`, as chat templates' `tojson` prints under
//! transformers (`ensure_ascii=False`, keys in their order, `", "` and
//! `": "` between items, or newlines under `indent`; floats as Python's
//! `repr`). minijinja's own `tojson` writes compact, HTML-escaped JSON:
//! a tool's schema would reach the model in other bytes than it was
//! trained on.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// The `tojson` filter: `value | tojson` or `value | tojson(indent=4)`.
pub fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Python's other parameters change the bytes; refused rather than ignored.
    for k in ["ensure_ascii", "separators", "sort_keys"] {
        if kwargs.has(k) {
            return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: `{k}` is not implemented")));
        }
    }
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write(v: &Value, indent: Option<usize>, level: usize, out: &mut String) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&float_repr(f64::try_from(v.clone())?)),
        ValueKind::String => string(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(&items, indent, level, out, '[', ']', |item, out| write(item, indent, level + 1, out))?;
        }
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            container(&keys, indent, level, out, '{', '}', |key, out| {
                match key.as_str() {
                    Some(k) => string(k, out),
                    // Python writes a number or constant key as its JSON text, quoted.
                    None => {
                        let mut k = String::new();
                        write(key, None, 0, &mut k)?;
                        string(&k, out)
                    }
                }
                out.push_str(": ");
                write(&v.get_item(key)?, indent, level + 1, out)
            })?;
        }
        other => return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: a value of kind {other} is not JSON"))),
    }
    Ok(())
}

fn container(
    items: &[Value],
    indent: Option<usize>,
    level: usize,
    out: &mut String,
    open: char,
    close: char,
    mut item: impl FnMut(&Value, &mut String) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, v) in items.iter().enumerate() {
        match indent {
            None if i > 0 => out.push_str(", "),
            None => {}
            Some(n) => {
                out.push_str(if i > 0 { ",\n" } else { "\n" });
                out.push_str(&" ".repeat(n * (level + 1)));
            }
        }
        item(v, out)?;
    }
    if let Some(n) = indent {
        out.push('\n');
        out.push_str(&" ".repeat(n * level));
    }
    out.push(close);
    Ok(())
}

/// A JSON string as Python writes it with `ensure_ascii=False`.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `str()` of a value, which Jinja2 prints for `{{ x }}` and
/// `x | string`: `True`, `None`, `1e-05`, `['a', 1]`, `{'k': 2.5}` (minijinja
/// writes `true`, `none`, `0.00001`, `["a", 1]`).
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => py_repr(v),
    }
}

/// Python's `repr()` (`str()` but for strings, which are quoted).
fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::None => "None".into(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if v.is_integer() => v.to_string(),
        ValueKind::Number => match f64::try_from(v.clone()) {
            Ok(x) if x.is_nan() => "nan".into(),
            Ok(x) if x.is_infinite() => if x > 0.0 { "inf" } else { "-inf" }.into(),
            Ok(x) => float_repr(x),
            Err(_) => v.to_string(),
        },
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            let mut out = String::from(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
                    c => out.push(c),
                }
            }
            out.push(quote);
            out
        }
        ValueKind::Seq | ValueKind::Iterable => match v.try_iter() {
            Ok(items) => format!("[{}]", items.map(|x| py_repr(&x)).collect::<Vec<_>>().join(", ")),
            Err(_) => v.to_string(),
        },
        ValueKind::Map => match v.try_iter() {
            Ok(keys) => {
                let items: Vec<String> = keys.map(|k| format!("{}: {}", py_repr(&k), py_repr(&v.get_item(&k).unwrap_or_default()))).collect();
                format!("{{{}}}", items.join(", "))
            }
            Err(_) => v.to_string(),
        },
        _ => v.to_string(),
    }
}

/// Python's `repr` of a float: the shortest digits that read back, in
/// positional notation where the point falls within -4 < decpt <= 16,
/// else `d.ddde±XX`; `.0` added to whole numbers.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's `{:e}` is the shortest round-trip digits, as Python's repr.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().expect("`{:e}`'s exponent is an integer");
    let decpt = exp + 1;
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let n = digits.len() as i32;
    if x == 0.0 {
        return format!("{sign}0.0");
    }
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
        } else if decpt >= n {
            format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
        } else {
            format!("{sign}{}.{}", &digits[..decpt as usize], &digits[decpt as usize..])
        }
    } else {
        let m = if n > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits.clone() };
        format!("{sign}{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What CPython 3's `str()` prints, for each kind of value.
    #[test]
    fn values_print_as_python_str() {
        let v = |j: &str| Value::from_serialize(serde_json::from_str::<serde_json::Value>(j).unwrap());
        for (json, want) in [
            ("1e-05", "1e-05"),
            ("2.5", "2.5"),
            ("3", "3"),
            ("true", "True"),
            ("null", "None"),
            ("\"a'b\"", "a'b"),
            ("[\"a\", 1, 0.5, false, null]", "['a', 1, 0.5, False, None]"),
            ("{\"k\": \"it's\", \"n\": [1e+20]}", "{'k': \"it's\", 'n': [1e+20]}"),
            ("\"tab\\there\"", "tab\there"),
            ("[\"tab\\there\\\\\"]", "['tab\\there\\\\']"),
        ] {
            assert_eq!(py_str(&v(json)), want, "{json}");
        }
    }

    /// Each expected text is what CPython 3 prints (`repr(x)`,
    /// `json.dumps(v, ensure_ascii=False[, indent=2])`).
    #[test]
    fn floats_print_as_python_repr() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345.6, "123456789012345.6"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (6.02214076e23, "6.02214076e+23"),
            (-0.0, "-0.0"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    fn dumps(v: serde_json::Value, indent: Option<usize>) -> String {
        let mut out = String::new();
        write(&Value::from_serialize(&v), indent, 0, &mut out).unwrap();
        out
    }

    #[test]
    fn values_print_as_python_json_dumps() {
        let v = serde_json::json!({"z": [1, 2.0, "é\"\\\n\u{1}"], "a": {}, "m": [], "n": null, "t": true});
        assert_eq!(dumps(v.clone(), None), r#"{"z": [1, 2.0, "é\"\\\n\u0001"], "a": {}, "m": [], "n": null, "t": true}"#);
        assert_eq!(
            dumps(v, Some(2)),
            "{\n  \"z\": [\n    1,\n    2.0,\n    \"é\\\"\\\\\\n\\u0001\"\n  ],\n  \"a\": {},\n  \"m\": [],\n  \"n\": null,\n  \"t\": true\n}"
        );
    }
}
