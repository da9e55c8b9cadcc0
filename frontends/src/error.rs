//! Errors that point at the thing (rustc style): what is wrong, in which
//! file, with the numbers, and what would help.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub message: String,
    pub file: String,
    pub notes: Vec<String>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(file: &str, message: impl Into<String>) -> Self {
        Diagnostic { message: message.into(), file: file.to_string(), notes: Vec::new(), help: None }
    }
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }
    pub fn help(mut self, h: impl Into<String>) -> Self {
        self.help = Some(h.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n  --> {}", self.message, self.file)?;
        for n in &self.notes {
            write!(f, "\n   = note: {n}")?;
        }
        if let Some(h) = &self.help {
            write!(f, "\n   = help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// Thousands separators, for byte counts in messages.
pub fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
